// SPDX-License-Identifier: Apache-2.0
#include "devices/pit/pit_counter.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace dsec::devices {
namespace {

// Clock nanoseconds at which exactly `ticks` input clocks have elapsed.
int64_t T(uint64_t ticks) { return PitCounter::TicksToNs(ticks); }

// Control words for counter 0 (SC = 00), LSB-then-MSB access.
constexpr uint8_t kMode0 = 0x30;
constexpr uint8_t kMode1 = 0x32;
constexpr uint8_t kMode2 = 0x34;
constexpr uint8_t kMode3 = 0x36;
constexpr uint8_t kMode4 = 0x38;
constexpr uint8_t kMode5 = 0x3a;

void Load(PitCounter& c, uint8_t control, uint16_t count, int64_t now_ns) {
  c.WriteControl(control, now_ns);
  c.WriteCount(static_cast<uint8_t>(count & 0xff), now_ns);
  c.WriteCount(static_cast<uint8_t>(count >> 8), now_ns);
}

uint16_t ReadWord(PitCounter& c, int64_t now_ns) {
  const uint8_t lsb = c.Read(now_ns);
  const uint8_t msb = c.Read(now_ns);
  return static_cast<uint16_t>(lsb | (msb << 8));
}

TEST(PitCounterTest, TickConversionRoundTripsExactly) {
  for (uint64_t t : {0ull, 1ull, 2ull, 1193ull, 11932ull, 65536ull, 1193182ull * 3600}) {
    EXPECT_EQ(PitCounter::NsToTicks(T(t)), t);
    if (t > 0) {
      EXPECT_EQ(PitCounter::NsToTicks(T(t) - 1), t - 1);
    }
  }
}

TEST(PitCounterTest, Mode0CountsDownRaisesOutAtTerminalCountAndWraps) {
  PitCounter c(true);
  c.WriteControl(kMode0, 0);
  EXPECT_FALSE(c.Output(0));  // mode 0: OUT low after the control word
  Load(c, kMode0, 1000, 0);
  EXPECT_EQ(c.CurrentCount(T(0)), 1000);
  EXPECT_EQ(c.CurrentCount(T(400)), 600);
  EXPECT_EQ(c.CurrentCount(T(999)), 1);
  EXPECT_FALSE(c.Output(T(999)));
  EXPECT_EQ(c.CurrentCount(T(1000)), 0);
  EXPECT_TRUE(c.Output(T(1000)));
  EXPECT_EQ(c.CurrentCount(T(1001)), 0xffff);
  EXPECT_TRUE(c.Output(T(5000)));
}

TEST(PitCounterTest, Mode0FirstByteOfTwoStopsCountingAndDrivesOutLow) {
  PitCounter c(true);
  Load(c, kMode0, 100, 0);
  EXPECT_TRUE(c.Output(T(200)));
  c.WriteCount(0x50, T(200));
  EXPECT_FALSE(c.Output(T(300)));
  const uint16_t frozen = c.CurrentCount(T(200));
  EXPECT_EQ(c.CurrentCount(T(300)), frozen);
  const int64_t start = T(300);
  c.WriteCount(0x00, start);  // count 0x0050 = 80 starts now
  EXPECT_EQ(c.CurrentCount(start + T(10)), 70);
  EXPECT_FALSE(c.Output(start + T(79)));
  EXPECT_TRUE(c.Output(start + T(80)));
}

TEST(PitCounterTest, Mode2RateGeneratorPulsesLowAtCountOne) {
  PitCounter c(true);
  Load(c, kMode2, 100, 0);
  EXPECT_EQ(c.CurrentCount(T(0)), 100);
  EXPECT_EQ(c.CurrentCount(T(1)), 99);
  EXPECT_EQ(c.CurrentCount(T(98)), 2);
  EXPECT_TRUE(c.Output(T(98)));
  EXPECT_EQ(c.CurrentCount(T(99)), 1);
  EXPECT_FALSE(c.Output(T(99)));
  EXPECT_EQ(c.CurrentCount(T(100)), 100);
  EXPECT_TRUE(c.Output(T(100)));
  EXPECT_EQ(c.CurrentCount(T(250)), 50);
}

TEST(PitCounterTest, Mode3EvenCountIsSymmetricSquareWave) {
  PitCounter c(true);
  Load(c, kMode3, 10, 0);
  const uint16_t counts[] = {10, 8, 6, 4, 2, 10, 8, 6, 4, 2, 10};
  const bool out[] = {true, true, true, true, true, false, false, false, false, false, true};
  for (uint64_t t = 0; t <= 10; ++t) {
    EXPECT_EQ(c.CurrentCount(T(t)), counts[t]) << "tick " << t;
    EXPECT_EQ(c.Output(T(t)), out[t]) << "tick " << t;
  }
}

TEST(PitCounterTest, Mode3OddCountIsHighOneClockLonger) {
  PitCounter c(true);
  Load(c, kMode3, 5, 0);
  const uint16_t counts[] = {4, 2, 0, 4, 2, 4};
  const bool out[] = {true, true, true, false, false, true};
  for (uint64_t t = 0; t <= 5; ++t) {
    EXPECT_EQ(c.CurrentCount(T(t)), counts[t]) << "tick " << t;
    EXPECT_EQ(c.Output(T(t)), out[t]) << "tick " << t;
  }
}

TEST(PitCounterTest, Mode4StrobesLowForOneClockAtTerminalCount) {
  PitCounter c(true);
  Load(c, kMode4, 50, 0);
  EXPECT_TRUE(c.Output(0));
  EXPECT_EQ(c.CurrentCount(T(10)), 40);
  EXPECT_TRUE(c.Output(T(49)));
  EXPECT_FALSE(c.Output(T(50)));
  EXPECT_TRUE(c.Output(T(51)));
  EXPECT_EQ(c.CurrentCount(T(51)), 0xffff);
}

TEST(PitCounterTest, Mode1WaitsForGateTriggerAndRetriggers) {
  PitCounter c(false);
  Load(c, kMode1, 100, 0);
  EXPECT_TRUE(c.Output(T(500)));
  EXPECT_TRUE(c.Status(T(500)) & 0x40);  // null count: not loaded yet
  // Times are offsets from the edge: T(a) - T(b) may fall just short of
  // a - b clocks.
  const int64_t trigger = T(1000);
  c.SetGate(true, trigger);
  EXPECT_FALSE(c.Output(trigger));
  EXPECT_EQ(c.CurrentCount(trigger + T(40)), 60);
  c.SetGate(false, trigger + T(50));  // gate low does not stop mode 1
  EXPECT_EQ(c.CurrentCount(trigger + T(60)), 40);
  const int64_t retrigger = trigger + T(70);
  c.SetGate(true, retrigger);  // starts over
  EXPECT_EQ(c.CurrentCount(retrigger), 100);
  EXPECT_FALSE(c.Output(retrigger + T(99)));
  EXPECT_TRUE(c.Output(retrigger + T(100)));
}

TEST(PitCounterTest, Mode5StrobesOnceAfterGateTrigger) {
  PitCounter c(false);
  Load(c, kMode5, 20, 0);
  EXPECT_TRUE(c.Output(T(100)));
  const int64_t trigger = T(100);
  c.SetGate(true, trigger);
  EXPECT_EQ(c.CurrentCount(trigger + T(10)), 10);
  EXPECT_TRUE(c.Output(trigger + T(19)));
  EXPECT_FALSE(c.Output(trigger + T(20)));
  EXPECT_TRUE(c.Output(trigger + T(21)));
}

TEST(PitCounterTest, GateLowSuspendsMode0) {
  PitCounter c(true);
  Load(c, kMode0, 1000, 0);
  c.SetGate(false, T(100));
  EXPECT_EQ(c.CurrentCount(T(500)), 900);
  const int64_t resume = T(500);
  c.SetGate(true, resume);
  EXPECT_EQ(c.CurrentCount(resume + T(100)), 800);
}

TEST(PitCounterTest, GateRisingEdgeRestartsMode2AndLowForcesOutHigh) {
  PitCounter c(true);
  Load(c, kMode2, 100, 0);
  c.SetGate(false, T(99));
  EXPECT_TRUE(c.Output(T(99)));
  EXPECT_EQ(c.CurrentCount(T(150)), 1);  // frozen
  const int64_t rise = T(200);
  c.SetGate(true, rise);
  EXPECT_EQ(c.CurrentCount(rise), 100);
  EXPECT_EQ(c.CurrentCount(rise + T(30)), 70);
}

TEST(PitCounterTest, CountOfZeroMeans65536) {
  PitCounter c(true);
  Load(c, kMode2, 0, 0);
  EXPECT_EQ(c.CurrentCount(T(0)), 0);
  EXPECT_EQ(c.CurrentCount(T(1)), 0xffff);
  EXPECT_EQ(c.CurrentCount(T(65535)), 1);
  EXPECT_EQ(c.CurrentCount(T(65536)), 0);
}

TEST(PitCounterTest, LsbOnlyAndMsbOnlyAccess) {
  PitCounter c(true);
  c.WriteControl(0x14, 0);  // LSB only, mode 2
  EXPECT_TRUE(c.WriteCount(0x34, 0));
  EXPECT_EQ(c.CurrentCount(0), 0x34);
  EXPECT_EQ(c.Read(T(4)), 0x30);
  EXPECT_EQ(c.Read(T(4)), 0x30);  // every read is the LSB
  c.WriteControl(0x24, 0);        // MSB only, mode 2
  EXPECT_TRUE(c.WriteCount(0x12, 0));
  EXPECT_EQ(c.CurrentCount(0), 0x1200);
  EXPECT_EQ(c.Read(T(0x100)), 0x11);
  EXPECT_EQ(c.Read(T(0x100)), 0x11);
}

TEST(PitCounterTest, LsbMsbWritesNeedBothBytesAndReadsAlternate) {
  PitCounter c(true);
  c.WriteControl(kMode2, 0);
  EXPECT_FALSE(c.WriteCount(0x34, 0));
  EXPECT_TRUE(c.WriteCount(0x12, 0));
  EXPECT_EQ(c.Read(T(0)), 0x34);
  EXPECT_EQ(c.Read(T(0)), 0x12);
  EXPECT_EQ(c.Read(T(0x34)), 0x00);
  EXPECT_EQ(c.Read(T(0x34)), 0x12);
}

TEST(PitCounterTest, LatchedCountIsHeldUntilReadAndSecondLatchIgnored) {
  PitCounter c(true);
  Load(c, kMode2, 1000, 0);
  c.LatchCount(T(100));
  c.LatchCount(T(200));  // ignored: the first latch was not read yet
  EXPECT_EQ(ReadWord(c, T(500)), 900);
  EXPECT_EQ(ReadWord(c, T(500)), 500);  // latch consumed: live again
  c.LatchCount(T(600));
  EXPECT_EQ(ReadWord(c, T(700)), 400);
}

TEST(PitCounterTest, StatusByteReportsOutNullCountAccessAndMode) {
  PitCounter c(true);
  c.WriteControl(kMode2, 0);
  EXPECT_EQ(c.Status(0), 0x80 | 0x40 | 0x34);
  c.WriteCount(0x10, 0);
  c.WriteCount(0x00, 0);
  EXPECT_EQ(c.Status(0), 0x80 | 0x34);
  Load(c, kMode0, 100, 0);
  EXPECT_EQ(c.Status(T(50)), 0x30);
  EXPECT_EQ(c.Status(T(100)), 0x80 | 0x30);
}

TEST(PitCounterTest, LatchedStatusIsReadBeforeLatchedCount) {
  PitCounter c(true);
  Load(c, kMode2, 1000, 0);
  c.LatchCount(T(10));
  c.LatchStatus(T(10));
  EXPECT_EQ(c.Read(T(20)), 0x80 | 0x34);
  EXPECT_EQ(ReadWord(c, T(20)), 990);
}

TEST(PitCounterTest, BcdModeCountsInDecimal) {
  PitCounter c(true);
  Load(c, 0x31, 0x1000, 0);  // mode 0, BCD, count 1000 decimal
  EXPECT_EQ(c.CurrentCount(T(0)), 0x1000);
  EXPECT_EQ(c.CurrentCount(T(1)), 0x0999);
  EXPECT_EQ(c.CurrentCount(T(1000)), 0x0000);
  EXPECT_TRUE(c.Output(T(1000)));
  EXPECT_EQ(c.CurrentCount(T(1001)), 0x9999);
  Load(c, 0x35, 0x0000, 0);  // mode 2, BCD, 0 means 10^4
  EXPECT_EQ(c.CurrentCount(T(1)), 0x9999);
  EXPECT_EQ(c.PlanEdges(0).period_ns, (10'000 * 1'000'000'000LL + 596'591) / 1'193'182);
}

TEST(PitCounterTest, ControlModes6And7AliasModes2And3) {
  PitCounter c(true);
  Load(c, 0x3c, 100, 0);  // M = 110
  EXPECT_EQ(c.mode(), 2);
  EXPECT_EQ(c.Status(0) & 0x0e, 0x0c);  // status shows the bits as written
  EXPECT_FALSE(c.Output(T(99)));
  Load(c, 0x3e, 100, 0);  // M = 111
  EXPECT_EQ(c.mode(), 3);
}

TEST(PitCounterTest, PlansPeriodicEdgesInModes2And3) {
  PitCounter c(true);
  Load(c, kMode2, 11932, 1000);
  PitCounter::EdgePlan plan = c.PlanEdges(1000);
  EXPECT_EQ(plan.kind, PitCounter::EdgePlan::Kind::kPeriodic);
  EXPECT_EQ(plan.first_edge_ns, 1000 + T(11932));
  EXPECT_EQ(plan.period_ns, 10'000'151);  // 100.0 Hz
  plan = c.PlanEdges(1000 + T(11932 * 3 + 5));
  EXPECT_EQ(plan.first_edge_ns, 1000 + T(11932 * 4));
  Load(c, kMode3, 1193, 0);
  EXPECT_EQ(c.PlanEdges(0).kind, PitCounter::EdgePlan::Kind::kPeriodic);
  EXPECT_EQ(c.PlanEdges(0).period_ns, 999'847);
}

TEST(PitCounterTest, PlansOneEdgeInModes0And4AndNoneAfterIt) {
  PitCounter c(true);
  Load(c, kMode0, 1193, 0);
  PitCounter::EdgePlan plan = c.PlanEdges(0);
  EXPECT_EQ(plan.kind, PitCounter::EdgePlan::Kind::kOnce);
  EXPECT_EQ(plan.first_edge_ns, T(1193));
  EXPECT_EQ(c.PlanEdges(T(1193)).kind, PitCounter::EdgePlan::Kind::kNone);
  Load(c, kMode4, 1193, 0);
  EXPECT_EQ(c.PlanEdges(0).first_edge_ns, T(1194));
  c.WriteControl(kMode2, 0);  // control word alone: stopped
  EXPECT_EQ(c.PlanEdges(0).kind, PitCounter::EdgePlan::Kind::kNone);
}

}  // namespace
}  // namespace dsec::devices
