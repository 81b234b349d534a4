// SPDX-License-Identifier: Apache-2.0
#include "bench/percentile.h"

#include <algorithm>
#include <cmath>

namespace dsec::bench {

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  double rank = std::ceil(p / 100.0 * static_cast<double>(values.size()));
  size_t idx = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return values[std::min(idx, values.size() - 1)];
}

}  // namespace dsec::bench
