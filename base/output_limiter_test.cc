// SPDX-License-Identifier: Apache-2.0
#include "base/output_limiter.h"

#include <string>

#include "gtest/gtest.h"

namespace dsec {
namespace {

TEST(OutputLimiterTest, UnlimitedKeepsEverything) {
  FakeClock clock;
  OutputLimiter limiter(0, 0, &clock);
  std::string out;
  limiter.Admit(std::string(100000, 'y'), &out);
  EXPECT_EQ(out.size(), 100000u);
  EXPECT_EQ(limiter.dropped_bytes(), 0u);
}

TEST(OutputLimiterTest, CapDropsAndCountsTheExcess) {
  FakeClock clock;
  OutputLimiter limiter(10, 0, &clock);
  std::string out;
  limiter.Admit("0123456", &out);
  limiter.Admit("789abcdef", &out);
  EXPECT_EQ(out, "0123456789");
  EXPECT_EQ(limiter.kept_bytes(), 10u);
  EXPECT_EQ(limiter.dropped_bytes(), 6u);
  EXPECT_EQ(limiter.dropped_by_cap(), 6u);
}

TEST(OutputLimiterTest, RateLimitDropsOverBurstAndRefillsWithTime) {
  FakeClock clock;
  OutputLimiter limiter(0, 100 << 10, &clock);  // 100 KiB/s, burst 100 KiB
  std::string out;
  limiter.Admit(std::string(150 << 10, 'y'), &out);
  EXPECT_EQ(out.size(), 100u << 10);
  EXPECT_EQ(limiter.dropped_by_rate(), 50u << 10);
  clock.AdvanceNs(500'000'000);  // half a second: 50 KiB more
  limiter.Admit(std::string(80 << 10, 'y'), &out);
  EXPECT_EQ(out.size(), 150u << 10);
  EXPECT_EQ(limiter.dropped_bytes(), 80u << 10);
}

TEST(OutputLimiterTest, BytesOverTheCapTakeNoTokens) {
  FakeClock clock;
  OutputLimiter limiter(1000, 100 << 10, &clock);
  std::string out;
  limiter.Admit(std::string(1 << 20, 'y'), &out);
  EXPECT_EQ(out.size(), 1000u);
  EXPECT_EQ(limiter.dropped_by_cap(), (1u << 20) - 1000);
  EXPECT_EQ(limiter.dropped_by_rate(), 0u);
}

}  // namespace
}  // namespace dsec
