// SPDX-License-Identifier: Apache-2.0
#include "base/token_bucket.h"

#include <chrono>
#include <cstdint>
#include <limits>
#include <thread>

#include "gtest/gtest.h"
#include "base/clock.h"

namespace dsec {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

TEST(TokenBucketTest, StartsFullAndRefusesBeyondBurst) {
  FakeClock clock;
  TokenBucket bucket(100, 10, &clock);
  EXPECT_EQ(bucket.Available(), 10u);
  EXPECT_TRUE(bucket.TryTake(10));
  EXPECT_FALSE(bucket.TryTake(1));
  EXPECT_EQ(bucket.Take(5), 0u);
}

TEST(TokenBucketTest, TryTakeIsAllOrNothing) {
  FakeClock clock;
  TokenBucket bucket(100, 10, &clock);
  EXPECT_TRUE(bucket.TryTake(7));
  EXPECT_FALSE(bucket.TryTake(4));
  EXPECT_EQ(bucket.Available(), 3u);  // the refused take consumed nothing
}

TEST(TokenBucketTest, TakeGrantsWhatIsAvailable) {
  FakeClock clock;
  TokenBucket bucket(100, 10, &clock);
  EXPECT_EQ(bucket.Take(25), 10u);
  EXPECT_EQ(bucket.Take(25), 0u);
}

TEST(TokenBucketTest, RefillsAtRateIncludingFractions) {
  FakeClock clock;
  TokenBucket bucket(1000, 1000, &clock);
  EXPECT_EQ(bucket.Take(1000), 1000u);
  clock.AdvanceNs(kSecond / 10);
  EXPECT_EQ(bucket.Available(), 100u);
  // 0.5 ms twice gives one whole token: fractions are kept, not rounded away.
  EXPECT_EQ(bucket.Take(100), 100u);
  clock.AdvanceNs(500'000);
  EXPECT_EQ(bucket.Available(), 0u);
  clock.AdvanceNs(500'000);
  EXPECT_EQ(bucket.Available(), 1u);
}

TEST(TokenBucketTest, RefillIsCappedAtBurst) {
  FakeClock clock;
  TokenBucket bucket(1000, 50, &clock);
  bucket.Take(50);
  clock.AdvanceNs(3600 * kSecond);
  EXPECT_EQ(bucket.Available(), 50u);
}

TEST(TokenBucketTest, ReportsTimeUntilAvailableRoundedUp) {
  FakeClock clock;
  TokenBucket bucket(3, 3, &clock);
  bucket.Take(3);
  // One token takes 1/3 s = 333333333.33 ns: round up so a timer never fires early.
  EXPECT_EQ(bucket.NsUntilAvailable(1), 333'333'334);
  clock.AdvanceNs(333'333'334);
  EXPECT_EQ(bucket.NsUntilAvailable(1), 0);
  EXPECT_TRUE(bucket.TryTake(1));
}

TEST(TokenBucketTest, RequestLargerThanBurstIsNever) {
  FakeClock clock;
  TokenBucket bucket(10, 5, &clock);
  EXPECT_EQ(bucket.NsUntilAvailable(6), TokenBucket::kNever);
  EXPECT_FALSE(bucket.TryTake(6));
}

TEST(TokenBucketTest, ZeroRateMeansUnlimited) {
  FakeClock clock;
  TokenBucket bucket(0, 0, &clock);
  EXPECT_TRUE(bucket.unlimited());
  EXPECT_TRUE(bucket.TryTake(std::numeric_limits<uint64_t>::max()));
  EXPECT_EQ(bucket.Take(12345), 12345u);
  EXPECT_EQ(bucket.NsUntilAvailable(1'000'000), 0);
}

TEST(TokenBucketTest, ZeroBurstMeansOneSecondOfRate) {
  FakeClock clock;
  TokenBucket bucket(64, 0, &clock);
  EXPECT_EQ(bucket.burst(), 64u);
  EXPECT_EQ(bucket.Take(100), 64u);
}

TEST(TokenBucketTest, HugeRatesAndGapsDoNotOverflow) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  FakeClock clock;
  TokenBucket bucket(kMax, kMax, &clock);
  EXPECT_EQ(bucket.Take(kMax), kMax);
  clock.AdvanceNs(std::numeric_limits<int64_t>::max() / 2);
  EXPECT_EQ(bucket.Available(), kMax);
  EXPECT_TRUE(bucket.TryTake(kMax));
  clock.AdvanceNs(1);
  EXPECT_EQ(bucket.Available(), kMax / 1'000'000'000);
}

TEST(TokenBucketTest, TinyRateReportsLongButFiniteWait) {
  FakeClock clock;
  TokenBucket bucket(1, 1, &clock);
  bucket.Take(1);
  EXPECT_EQ(bucket.NsUntilAvailable(1), kSecond);
}

TEST(TokenBucketTest, ClockGoingBackwardsAddsNothing) {
  FakeClock clock(10 * kSecond);
  TokenBucket bucket(100, 100, &clock);
  bucket.Take(100);
  clock.SetNs(5 * kSecond);
  EXPECT_EQ(bucket.Available(), 0u);
  clock.SetNs(5 * kSecond + kSecond / 100);
  EXPECT_EQ(bucket.Available(), 1u);
}

}  // namespace
}  // namespace dsec

namespace dsec {
namespace {

TEST(PausableClockTest, StandsStillWhilePausedAndGoesOnFromThere) {
  PausableClock clock;
  const int64_t a = clock.NowNs();
  EXPECT_LE(a, MonotonicNowNs());
  clock.Pause();
  clock.Pause();  // idempotent
  const int64_t paused = clock.NowNs();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(clock.NowNs(), paused);
  clock.Resume();
  const int64_t resumed = clock.NowNs();
  EXPECT_GE(resumed, paused);
  EXPECT_LT(resumed - paused, 40'000'000) << "the 50 ms paused were counted";
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(clock.NowNs() - resumed, 20'000'000);  // and it runs again
  clock.Resume();  // idempotent
  EXPECT_GE(MonotonicNowNs() - clock.NowNs(), 50'000'000);  // behind by what it stood
}

}  // namespace
}  // namespace dsec
