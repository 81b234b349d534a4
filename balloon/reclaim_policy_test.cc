// SPDX-License-Identifier: Apache-2.0
#include "balloon/reclaim_policy.h"

#include "gtest/gtest.h"

namespace dsec::balloon {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr int64_t kSec = 1'000'000'000;

class ReclaimPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    knobs_.min_free_mib = 64;
    knobs_.aggressiveness = 0.5;
    obs_.now_ns = 100 * kSec;
    obs_.has_balloon = true;
    obs_.driver_active = true;
    obs_.ram_pages = 1024 * kMiB / 4096;
    obs_.interval_ns = kSec;
  }
  // available_mib < 0: the guest does not report an available figure.
  void Stats(uint64_t free_mib, uint64_t majflt = 0, int64_t available_mib = -1) {
    devices::BalloonStatsSample s;
    s.stats.Set(devices::BalloonStatTag::kFreeMemory, free_mib * kMiB);
    s.stats.Set(devices::BalloonStatTag::kMajorFaults, majflt);
    if (available_mib >= 0) {
      s.stats.Set(devices::BalloonStatTag::kAvailableMemory, static_cast<uint64_t>(available_mib) * kMiB);
    }
    s.received_ns = obs_.now_ns;
    s.sequence = obs_.stats ? obs_.stats->sequence + 1 : 1;
    obs_.stats = s;
  }
  PolicyDecision Decide() { return DecideReclaim(knobs_, obs_, state_); }

  ReclaimKnobs knobs_;
  VmObservation obs_;
  VmPolicyState state_;
};

TEST_F(ReclaimPolicyTest, InflatesByAggressivenessTimesExcessFree) {
  Stats(512);
  PolicyDecision d = Decide();
  ASSERT_TRUE(d.target_pages.has_value());
  EXPECT_EQ(*d.target_pages, (512 - 64) / 2 * kMiB / 4096);  // 224 MiB
  EXPECT_FALSE(d.pressure);
  obs_.target_pages = *d.target_pages;
  EXPECT_FALSE(Decide().target_pages.has_value());  // same stats: no new decision
}

TEST_F(ReclaimPolicyTest, TakesDroppableCacheALinuxGuestReportsAsAvailable) {
  // A Linux guest whose page cache filled its RAM: 20 MiB free (below
  // min_free), 700 MiB available. Not pressure; half the excess available.
  obs_.resident_known = true;
  obs_.resident_pages = 1000 * kMiB / 4096;
  Stats(20, 0, 700);
  PolicyDecision d = Decide();
  EXPECT_FALSE(d.pressure);
  ASSERT_TRUE(d.target_pages.has_value());
  EXPECT_EQ(*d.target_pages, (700 - 64) / 2 * kMiB / 4096);  // 318 MiB
}

TEST_F(ReclaimPolicyTest, AvailableCacheTheHostDoesNotBackIsNotTaken) {
  // 700 MiB available, but only 400 MiB resident: the guest's unreclaimable
  // use is 1024 - 700 = 324 MiB, so 76 MiB of what is resident can go.
  knobs_.aggressiveness = 1.0;
  obs_.resident_known = true;
  obs_.resident_pages = 400 * kMiB / 4096;
  Stats(20, 0, 700);
  PolicyDecision d = Decide();
  ASSERT_TRUE(d.target_pages.has_value());
  EXPECT_EQ(*d.target_pages, 76 * kMiB / 4096);
}

TEST_F(ReclaimPolicyTest, LowAvailableIsPressure) {
  obs_.balloon_pages = 512 * kMiB / 4096;
  obs_.target_pages = 512 * kMiB / 4096;
  Stats(10, 0, 40);  // 40 MiB available < 64 min_free
  PolicyDecision d = Decide();
  EXPECT_TRUE(d.pressure);
  ASSERT_TRUE(d.target_pages.has_value());
  EXPECT_EQ(*d.target_pages, (512 - 24) * kMiB / 4096);
}

TEST_F(ReclaimPolicyTest, NeverTakesTheLastMinFree) {
  knobs_.aggressiveness = 1.0;
  obs_.balloon_pages = 940 * kMiB / 4096;
  Stats(100);  // 940 + 36 MiB would leave less than min_free
  PolicyDecision d = Decide();
  ASSERT_TRUE(d.target_pages.has_value());
  EXPECT_EQ(*d.target_pages, (1024 - 64) * kMiB / 4096);  // capped at RAM - min_free
}

TEST_F(ReclaimPolicyTest, InflatesOnlyOverGuestFreeMemoryTheHostBacks) {
  // 1 GiB guest, 900 MiB free, but the host backs only the 124 MiB in use:
  // inflating would release nothing.
  obs_.resident_known = true;
  obs_.resident_pages = 124 * kMiB / 4096;
  Stats(900);
  EXPECT_FALSE(Decide().target_pages.has_value());
  // After a burst was freed: 600 MiB resident, 124 in use -> 476 MiB worth it.
  obs_.resident_pages = 600 * kMiB / 4096;
  Stats(900);
  PolicyDecision d = Decide();
  ASSERT_TRUE(d.target_pages.has_value());
  EXPECT_EQ(*d.target_pages, 476 / 2 * kMiB / 4096);
  // Pages already in the balloon are not "in use": same answer with a
  // 100 MiB balloon and 100 MiB less free memory.
  obs_.balloon_pages = 100 * kMiB / 4096;
  obs_.target_pages = obs_.balloon_pages;
  Stats(800);
  d = Decide();
  ASSERT_TRUE(d.target_pages.has_value());
  EXPECT_EQ(*d.target_pages, (100 + 476 / 2) * kMiB / 4096);
}

TEST_F(ReclaimPolicyTest, SmallStepsAreNotWorthAConfigChange) {
  Stats(65);
  EXPECT_FALSE(Decide().target_pages.has_value());
}

TEST_F(ReclaimPolicyTest, DeflatesWhenFreeFallsBelowMin) {
  obs_.balloon_pages = obs_.target_pages = 256 * kMiB / 4096;
  Stats(16);
  PolicyDecision d = Decide();
  EXPECT_TRUE(d.pressure);
  ASSERT_TRUE(d.target_pages.has_value());
  EXPECT_EQ(*d.target_pages, (256 - 48) * kMiB / 4096);
}

TEST_F(ReclaimPolicyTest, DeflatesHalfTheBalloonWhenMajorFaultsRise) {
  obs_.balloon_pages = obs_.target_pages = 256 * kMiB / 4096;
  Stats(200, 1000);
  EXPECT_FALSE(Decide().pressure);  // first sample: no rate yet
  obs_.now_ns += kSec;
  Stats(200, 1000 + 500);  // 500 major faults/s > 200
  PolicyDecision d = Decide();
  EXPECT_TRUE(d.pressure);
  ASSERT_TRUE(d.target_pages.has_value());
  EXPECT_EQ(*d.target_pages, 128 * kMiB / 4096);
}

TEST_F(ReclaimPolicyTest, AcceptsGuestOomDeflationAndHoldsInflation) {
  obs_.target_pages = 1000;
  obs_.balloon_pages = 400;
  obs_.deflated_unrequested_pages = 600;
  PolicyDecision d = Decide();
  EXPECT_TRUE(d.pressure);
  EXPECT_EQ(d.target_pages, 400u);
  obs_.target_pages = 400;
  obs_.now_ns += kSec;
  Stats(800);
  EXPECT_FALSE(Decide().target_pages.has_value());  // held
  obs_.now_ns += knobs_.pause_ns;
  Stats(800);
  EXPECT_TRUE(Decide().target_pages.has_value());
}

TEST_F(ReclaimPolicyTest, StaleStatsAreIgnored) {
  Stats(512);
  obs_.now_ns += knobs_.stats_max_age_ns + 1;
  EXPECT_FALSE(Decide().target_pages.has_value());
}

TEST_F(ReclaimPolicyTest, NoBalloonActionWithoutDriver) {
  obs_.driver_active = false;
  Stats(512);
  EXPECT_FALSE(Decide().target_pages.has_value());
}

TEST_F(ReclaimPolicyTest, PagesOutColdestFirstOnlyWithSwap) {
  obs_.ws_ok = true;
  obs_.ws.cold = {{{0x1000000, 8 * kMiB}, 9}, {{0x3000000, 8 * kMiB}, 4}};
  EXPECT_TRUE(Decide().pageout.empty());  // no swap, no zram
  obs_.swap_available = true;
  PolicyDecision d = Decide();
  ASSERT_EQ(d.pageout.size(), 1u);  // half of 16 MiB, coldest range first
  EXPECT_EQ(d.pageout[0].addr, 0x1000000u);
  EXPECT_EQ(d.pageout[0].size, 8 * kMiB);
  knobs_.aggressiveness = 0;
  EXPECT_TRUE(Decide().pageout.empty());
}

TEST_F(ReclaimPolicyTest, StopsPageoutWhileRefaultsExceedMaxSlowdown) {
  obs_.ws_ok = true;
  obs_.swap_available = true;
  obs_.ws.cold = {{{0x1000000, 8 * kMiB}, 9}};
  knobs_.max_slowdown = 0.05;
  knobs_.refault_cost_ns = 20'000;
  obs_.refault_bytes = 5000 * 4096;  // 5000 refaults/s * 20 us = 10% > 5%
  PolicyDecision d = Decide();
  EXPECT_TRUE(d.pageout_paused);
  EXPECT_NEAR(d.slowdown, 0.10, 1e-9);
  EXPECT_TRUE(d.pageout.empty());
  obs_.refault_bytes = 0;
  obs_.now_ns += knobs_.pause_ns / 2;
  EXPECT_TRUE(Decide().pageout_paused);  // still paused
  obs_.now_ns += knobs_.pause_ns;
  d = Decide();
  EXPECT_FALSE(d.pageout_paused);
  EXPECT_FALSE(d.pageout.empty());
}

TEST_F(ReclaimPolicyTest, NoPageoutUnderGuestPressure) {
  obs_.ws_ok = true;
  obs_.swap_available = true;
  obs_.ws.cold = {{{0x1000000, 8 * kMiB}, 9}};
  Stats(10);
  PolicyDecision d = Decide();
  EXPECT_TRUE(d.pressure);
  EXPECT_TRUE(d.pageout.empty());
}

}  // namespace
}  // namespace dsec::balloon
