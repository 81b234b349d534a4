// SPDX-License-Identifier: Apache-2.0
#include "devices/net/net_rate_limiter.h"

#include "gtest/gtest.h"

namespace dsec::devices {
namespace {

TEST(NetRateLimiterTest, UnlimitedAlwaysAdmits) {
  FakeClock clock;
  NetRateLimiter limiter(NetRateLimit{}, &clock);
  EXPECT_TRUE(limiter.unlimited());
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(limiter.NsUntilAdmitted(), 0);
    limiter.Charge(65550);
  }
}

TEST(NetRateLimiterTest, PacketLimitDefersUntilTokenRefills) {
  FakeClock clock;
  NetRateLimiter limiter(NetRateLimit{.packets_per_second = 10, .packets_burst = 2}, &clock);
  EXPECT_EQ(limiter.NsUntilAdmitted(), 0);
  limiter.Charge(100);
  EXPECT_EQ(limiter.NsUntilAdmitted(), 0);
  limiter.Charge(100);
  EXPECT_EQ(limiter.NsUntilAdmitted(), 100'000'000);
  clock.AdvanceNs(100'000'000);
  EXPECT_EQ(limiter.NsUntilAdmitted(), 0);
}

TEST(NetRateLimiterTest, FrameLargerThanBurstBecomesDebtThatHoldsBackLaterFrames) {
  FakeClock clock;
  NetRateLimiter limiter(NetRateLimit{.bytes_per_second = 1000, .bytes_burst = 100}, &clock);
  EXPECT_EQ(limiter.NsUntilAdmitted(), 0);
  limiter.Charge(350);  // 100 paid now, 250 owed
  // 250 bytes at 1000/s, paid in burst-sized steps: 100 ms first.
  EXPECT_EQ(limiter.NsUntilAdmitted(), 100'000'000);
  clock.AdvanceNs(100'000'000);
  EXPECT_EQ(limiter.NsUntilAdmitted(), 100'000'000);
  clock.AdvanceNs(100'000'000);
  EXPECT_EQ(limiter.NsUntilAdmitted(), 50'000'000);
  clock.AdvanceNs(50'000'000);
  // Debt paid, but the bucket is empty: one more byte first.
  EXPECT_EQ(limiter.NsUntilAdmitted(), 1'000'000);
  clock.AdvanceNs(1'000'000);
  EXPECT_EQ(limiter.NsUntilAdmitted(), 0);
}

}  // namespace
}  // namespace dsec::devices
