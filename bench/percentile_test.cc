// SPDX-License-Identifier: Apache-2.0
#include "bench/percentile.h"

#include "gtest/gtest.h"

namespace dsec::bench {
namespace {

TEST(Percentile, NearestRank) {
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_EQ(Percentile({3, 1, 2}, 50), 2);
  EXPECT_EQ(Percentile({1, 2, 3, 4}, 50), 2);
  EXPECT_EQ(Percentile({1, 2, 3, 4}, 99), 4);
  EXPECT_EQ(Percentile({5}, 0), 5);
  // 20 samples: p50 is the 10th, p99 the 20th, p95 the 19th.
  std::vector<double> v;
  for (int i = 20; i >= 1; --i) v.push_back(i);
  EXPECT_EQ(Percentile(v, 50), 10);
  EXPECT_EQ(Percentile(v, 95), 19);
  EXPECT_EQ(Percentile(v, 99), 20);
  EXPECT_EQ(Percentile(v, 100), 20);
}

}  // namespace
}  // namespace dsec::bench
