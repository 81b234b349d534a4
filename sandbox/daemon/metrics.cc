// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <tuple>
#include <utility>

namespace dsec::daemon {

Histogram::Histogram(std::vector<double> bounds_ms)
    : bounds_(std::move(bounds_ms)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double ms) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < bounds_.size() && ms > bounds_[i]) ++i;
  counts_[i]++;
  sum_ += ms / 1000.0;
  count_++;
}

std::string Histogram::Render(const std::string& name, const std::string& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    absl::StrAppendFormat(&out, "%s_bucket{%s%sle=\"%g\"} %d\n", name, labels, sep,
                          bounds_[i] / 1000.0, cum);
  }
  cum += counts_.back();
  absl::StrAppendFormat(&out, "%s_bucket{%s%sle=\"+Inf\"} %d\n", name, labels, sep, cum);
  const std::string braces = labels.empty() ? "" : absl::StrCat("{", labels, "}");
  absl::StrAppendFormat(&out, "%s_sum%s %.6f\n%s_count%s %d\n", name, braces, sum_, name, braces,
                        count_);
  return out;
}

namespace {
std::vector<double> LatencyBounds() {
  return {1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000};
}
}  // namespace

Metrics::Metrics(const std::vector<std::string>& tiers) {
  for (const std::string& tier : tiers) {
    create_ms.emplace(std::piecewise_construct, std::forward_as_tuple(tier),
                      std::forward_as_tuple(LatencyBounds()));
    exec_ms.emplace(std::piecewise_construct, std::forward_as_tuple(tier),
                    std::forward_as_tuple(LatencyBounds()));
    execs_total[tier] = 0;
  }
}

}  // namespace dsec::daemon
