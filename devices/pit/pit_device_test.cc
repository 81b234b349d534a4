// SPDX-License-Identifier: Apache-2.0
#include "devices/pit/pit_device.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "platform/interrupt/fake_interrupt_line.h"
#include "devices/pit/fake_timer_service.h"
#include "gtest/gtest.h"
#include "base/event_loop.h"

namespace dsec::devices {
namespace {

int64_t T(uint64_t ticks) { return PitCounter::TicksToNs(ticks); }

class PitDeviceTest : public ::testing::Test {
 protected:
  explicit PitDeviceTest(uint32_t max_irq_hz = PitDevice::kDefaultMaxIrqHz) {
    PitDevice::Options options;
    options.clock = &clock_;
    options.irq0 = &irq_;
    options.timers = &timers_;
    options.max_irq_hz = max_irq_hz;
    pit_ = PitDevice::Create(options);
    counters_ = pit_->counter_ports();
    port_b_ = pit_->port_b();
  }

  // Port I/O by absolute port number, as the PIO bus would route it.
  uint8_t In(uint16_t port) {
    uint8_t v = 0;
    if (port == 0x61) {
      port_b_->Read(0, std::span<uint8_t>(&v, 1));
    } else {
      counters_->Read(port - 0x40, std::span<uint8_t>(&v, 1));
    }
    return v;
  }
  void Out(uint16_t port, uint8_t v) {
    if (port == 0x61) {
      port_b_->Write(0, std::span<const uint8_t>(&v, 1));
    } else {
      counters_->Write(port - 0x40, std::span<const uint8_t>(&v, 1));
    }
  }
  void ProgramCounter0(uint8_t control, uint16_t count) {
    Out(0x43, control);
    Out(0x40, static_cast<uint8_t>(count & 0xff));
    Out(0x40, static_cast<uint8_t>(count >> 8));
  }
  // The timer the device armed after the loop ran its posted work.
  std::optional<int> ArmedTimer() {
    timers_.RunPosted();
    return timers_.OnlyTimer();
  }

  FakeClock clock_{1'000'000};
  FakeInterruptLine irq_;
  FakeTimerService timers_;
  std::shared_ptr<PitDevice> pit_;
  std::shared_ptr<bus::BusDevice> counters_;
  std::shared_ptr<bus::BusDevice> port_b_;
};

TEST_F(PitDeviceTest, ControlPortReadsAllOnes) { EXPECT_EQ(In(0x43), 0xff); }

TEST_F(PitDeviceTest, ControlWordSelectsCounterByItsTopBits) {
  Out(0x61, 0x01);  // counter 2's gate
  Out(0x43, 0xb4);  // counter 2, LSB/MSB, mode 2
  Out(0x42, 0x00);
  Out(0x42, 0x10);
  Out(0x43, 0x80);  // counter 2 latch
  const int64_t start = clock_.NowNs();
  clock_.SetNs(start + T(0x100));
  EXPECT_EQ(In(0x42), 0x00);
  EXPECT_EQ(In(0x42), 0x10);  // latched at the start
  EXPECT_EQ(In(0x42), 0x00);
  EXPECT_EQ(In(0x42), 0x0f);  // live: 0x1000 - 0x100
}

TEST_F(PitDeviceTest, ReadBackLatchesStatusAndCountOfSelectedCounters) {
  ProgramCounter0(0x34, 1000);
  Out(0x43, 0x74);  // counter 1, LSB/MSB, mode 2
  Out(0x41, 0xe8);
  Out(0x41, 0x03);
  const int64_t start = clock_.NowNs();
  clock_.SetNs(start + T(100));
  Out(0x43, 0xc2);  // read-back: count and status of counter 0
  Out(0x43, 0xe4);  // read-back: status only of counter 1
  clock_.SetNs(start + T(300));
  EXPECT_EQ(In(0x40), 0xb4);  // OUT high, RW 3, mode 2
  EXPECT_EQ(In(0x40) | (In(0x40) << 8), 900);
  EXPECT_EQ(In(0x41), 0xb4);
  EXPECT_EQ(In(0x41) | (In(0x41) << 8), 700);  // count was not latched
}

TEST_F(PitDeviceTest, LinuxQuickPitCalibrateSeesMsbFallEvery256Clocks) {
  // arch/x86/kernel/tsc.c quick_pit_calibrate(): gate high, speaker off,
  // counter 2 mode 0 with 0xffff, then reads LSB and MSB, checking the MSB.
  Out(0x61, (In(0x61) & ~0x02) | 0x01);
  Out(0x43, 0xb0);
  Out(0x42, 0xff);
  Out(0x42, 0xff);
  const int64_t start = clock_.NowNs();
  for (uint64_t k = 0; k < 200; ++k) {
    clock_.SetNs(start + T(256 * k + 3));
    In(0x42);
    EXPECT_EQ(In(0x42), 0xff - k) << "after " << 256 * k + 3 << " clocks";
  }
}

TEST_F(PitDeviceTest, LinuxPitCalibrateTscSeesOut2RiseAfterLatch) {
  // arch/x86/kernel/tsc.c pit_calibrate_tsc(): 50 ms in mode 0 on counter 2,
  // polling port 0x61 bit 5.
  constexpr uint16_t kLatch = 1193182 / (1000 / 50);
  Out(0x61, (In(0x61) & ~0x02) | 0x01);
  Out(0x43, 0xb0);
  Out(0x42, kLatch & 0xff);
  Out(0x42, kLatch >> 8);
  const int64_t start = clock_.NowNs();
  EXPECT_EQ(In(0x61) & 0x20, 0);
  clock_.SetNs(start + T(kLatch - 1));
  EXPECT_EQ(In(0x61) & 0x20, 0);
  clock_.SetNs(start + T(kLatch));
  EXPECT_EQ(In(0x61) & 0x20, 0x20);
  EXPECT_EQ(timers_.added(), 0u);  // counter 2 needs no host timer
}

TEST_F(PitDeviceTest, Port61GateBitStopsAndStartsCounter2) {
  Out(0x61, 0x00);
  Out(0x43, 0xb0);  // mode 0: gate low suspends counting
  Out(0x42, 0xe8);
  Out(0x42, 0x03);
  clock_.AdvanceNs(T(500));
  Out(0x43, 0x80);
  EXPECT_EQ(In(0x42) | (In(0x42) << 8), 1000);
  Out(0x61, 0x01);
  const int64_t rise = clock_.NowNs();
  clock_.SetNs(rise + T(400));
  EXPECT_EQ(In(0x42) | (In(0x42) << 8), 600);
}

TEST_F(PitDeviceTest, Port61Counter2Mode1TriggersOnGateEdge) {
  Out(0x61, 0x00);
  Out(0x43, 0xb2);  // counter 2, mode 1
  Out(0x42, 100);
  Out(0x42, 0);
  EXPECT_EQ(In(0x61) & 0x20, 0x20);
  Out(0x61, 0x01);
  const int64_t rise = clock_.NowNs();
  EXPECT_EQ(In(0x61) & 0x20, 0);
  clock_.SetNs(rise + T(100));
  EXPECT_EQ(In(0x61) & 0x20, 0x20);
}

TEST_F(PitDeviceTest, Port61ReadsBackLowBitsAndIgnoresWritesToStatusBits) {
  Out(0x61, 0xff);
  EXPECT_EQ(In(0x61) & 0xcf, 0x0f);
  Out(0x61, 0x02);
  EXPECT_EQ(In(0x61) & 0xcf, 0x02);
}

TEST_F(PitDeviceTest, Port61RefreshBitTogglesOnEveryRead) {
  const uint8_t first = In(0x61) & 0x10;
  for (int i = 1; i < 8; ++i) {
    EXPECT_EQ(In(0x61) & 0x10, (i % 2 == 0) ? first : (first ^ 0x10));
  }
}

TEST_F(PitDeviceTest, Irq0PeriodicAt100HzTriggersOncePerExpiry) {
  ProgramCounter0(0x34, 11932);
  EXPECT_EQ(timers_.armed(), 0u);  // arming happens on the loop
  std::optional<int> id = ArmedTimer();
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(timers_.timer(*id)->interval_ns, 10'000'151);
  EXPECT_EQ(timers_.timer(*id)->first_ns, T(11932));
  for (int i = 0; i < 25; ++i) ASSERT_TRUE(timers_.Fire(*id));
  EXPECT_EQ(irq_.count(), 25u);
  PitDevice::Metrics m = pit_->metrics();
  EXPECT_EQ(m.irqs, 25u);
  EXPECT_EQ(m.reprograms, 2u);  // control word (stop), then the count
  EXPECT_EQ(m.clamped, 0u);
}

TEST_F(PitDeviceTest, Irq0OneShotInMode0FiresOnce) {
  ProgramCounter0(0x30, 1193);
  std::optional<int> id = ArmedTimer();
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(timers_.timer(*id)->interval_ns, 0);
  EXPECT_EQ(timers_.timer(*id)->first_ns, T(1193));
  clock_.AdvanceNs(T(1193));
  ASSERT_TRUE(timers_.Fire(*id));
  EXPECT_EQ(irq_.count(), 1u);
  EXPECT_EQ(timers_.armed(), 0u);
  // A new count re-arms; the fired one-shot is not cancelled again.
  Out(0x40, 0x10);
  Out(0x40, 0x00);
  ASSERT_TRUE(ArmedTimer().has_value());
  EXPECT_EQ(timers_.cancelled(), 0u);
}

TEST_F(PitDeviceTest, Irq0OneShotInMode4AsLinuxOneshotClockevent) {
  ProgramCounter0(0x38, 100);
  std::optional<int> id = ArmedTimer();
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(timers_.timer(*id)->interval_ns, 0);
  EXPECT_EQ(timers_.timer(*id)->first_ns, T(101));
  ASSERT_TRUE(timers_.Fire(*id));
  EXPECT_EQ(irq_.count(), 1u);
}

TEST_F(PitDeviceTest, ReprogrammingCancelsTheOldTimer) {
  ProgramCounter0(0x34, 11932);
  std::optional<int> old_id = ArmedTimer();
  ASSERT_TRUE(old_id.has_value());
  ProgramCounter0(0x34, 1193);
  std::optional<int> new_id = ArmedTimer();
  ASSERT_TRUE(new_id.has_value());
  EXPECT_NE(*new_id, *old_id);
  EXPECT_FALSE(timers_.Fire(*old_id));
  EXPECT_EQ(timers_.timer(*new_id)->interval_ns, 999'847);
  EXPECT_EQ(timers_.cancelled(), 1u);
}

TEST_F(PitDeviceTest, ExpiryOfSupersededPlanRaisesNothing) {
  ProgramCounter0(0x34, 11932);
  std::optional<int> id = ArmedTimer();
  ASSERT_TRUE(id.has_value());
  ProgramCounter0(0x34, 5966);  // the loop has not synced yet
  ASSERT_TRUE(timers_.Fire(*id));
  EXPECT_EQ(irq_.count(), 0u);
  std::optional<int> new_id = ArmedTimer();
  ASSERT_TRUE(new_id.has_value());
  ASSERT_TRUE(timers_.Fire(*new_id));
  EXPECT_EQ(irq_.count(), 1u);
}

TEST_F(PitDeviceTest, ControlWordAloneStopsIrq0) {
  ProgramCounter0(0x34, 11932);
  ASSERT_TRUE(ArmedTimer().has_value());
  Out(0x43, 0x34);
  timers_.RunPosted();
  EXPECT_EQ(timers_.armed(), 0u);
}

TEST_F(PitDeviceTest, LateLoopSkipsMissedTicksInsteadOfReinjecting) {
  ProgramCounter0(0x34, 11932);
  clock_.AdvanceNs(35'000'000);  // 3.5 periods pass before the loop runs
  std::optional<int> id = ArmedTimer();
  ASSERT_TRUE(id.has_value());
  // The next edge on the programmed grid (the 4th), not an immediate burst.
  EXPECT_NEAR(timers_.timer(*id)->first_ns, T(4 * 11932) - 35'000'000, 2);
  ASSERT_TRUE(timers_.Fire(*id));
  EXPECT_EQ(irq_.count(), 1u);
}

TEST_F(PitDeviceTest, Counters1And2ArmNoTimer) {
  Out(0x43, 0x74);
  Out(0x41, 0x10);
  Out(0x41, 0x00);
  Out(0x43, 0xb6);
  Out(0x42, 0x10);
  Out(0x42, 0x00);
  EXPECT_EQ(timers_.RunPosted(), 0u);
  EXPECT_EQ(timers_.added(), 0u);
  EXPECT_EQ(pit_->metrics().reprograms, 0u);
}

TEST_F(PitDeviceTest, DeviceDestroyedBeforeLoopIgnoresItsTimer) {
  ProgramCounter0(0x34, 11932);
  std::optional<int> id = ArmedTimer();
  ASSERT_TRUE(id.has_value());
  ProgramCounter0(0x34, 1193);  // leaves a sync task posted
  counters_.reset();
  port_b_.reset();
  pit_.reset();
  timers_.RunPosted();
  EXPECT_TRUE(timers_.Fire(*id));
  EXPECT_EQ(irq_.count(), 0u);
}

TEST_F(PitDeviceTest, ConcurrentPort61ReadsEachFlipRefreshOnce) {
  constexpr int kReadsPerThread = 5000;
  std::vector<std::thread> vcpus;
  for (int t = 0; t < 2; ++t) {
    vcpus.emplace_back([this] {
      for (int i = 0; i < kReadsPerThread; ++i) {
        In(0x61);
        In(0x42);
      }
    });
  }
  for (auto& t : vcpus) t.join();
  // An even number of reads so far: the next one reads like the first.
  EXPECT_EQ(In(0x61) & 0x10, 0x10);
}

class PitDeviceClampTest : public PitDeviceTest {
 protected:
  PitDeviceClampTest() : PitDeviceTest(1000) {}
};

TEST_F(PitDeviceTest, ClampsTinyDivisorsToTenKilohertz) {
  ProgramCounter0(0x34, 1);
  std::optional<int> id = ArmedTimer();
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(timers_.timer(*id)->interval_ns, 100'000);
  EXPECT_EQ(timers_.timer(*id)->first_ns, 100'000);
  ProgramCounter0(0x36, 2);
  id = ArmedTimer();
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(timers_.timer(*id)->interval_ns, 100'000);
  ProgramCounter0(0x34, 119);  // 10.03 kHz: just above the limit
  id = ArmedTimer();
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(timers_.timer(*id)->interval_ns, 100'000);
  ProgramCounter0(0x34, 120);  // 9.94 kHz: allowed
  id = ArmedTimer();
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(timers_.timer(*id)->interval_ns, 100'571);
  EXPECT_EQ(pit_->metrics().clamped, 3u);
}

TEST_F(PitDeviceClampTest, ClampFollowsConfiguredMaximum) {
  ProgramCounter0(0x34, 596);  // 2 kHz
  std::optional<int> id = ArmedTimer();
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(timers_.timer(*id)->interval_ns, 1'000'000);
  EXPECT_EQ(pit_->metrics().clamped, 1u);
}

TEST(PitDeviceStandaloneTest, WithoutIrqLineCountsButArmsNothing) {
  FakeClock clock(0);
  PitDevice::Options options;
  options.clock = &clock;
  std::shared_ptr<PitDevice> pit = PitDevice::Create(options);
  std::shared_ptr<bus::BusDevice> ports = pit->counter_ports();
  const uint8_t program[] = {0x34, 0x9c, 0x2e};
  ports->Write(3, std::span<const uint8_t>(program, 1));
  ports->Write(0, std::span<const uint8_t>(program + 1, 1));
  ports->Write(0, std::span<const uint8_t>(program + 2, 1));
  clock.SetNs(T(1000));
  uint8_t bytes[2];
  ports->Read(0, std::span<uint8_t>(bytes, 1));
  ports->Read(0, std::span<uint8_t>(bytes + 1, 1));
  EXPECT_EQ(bytes[0] | (bytes[1] << 8), 11932 - 1000);
  EXPECT_EQ(pit->metrics().reprograms, 0u);
}

TEST(PitDeviceEventLoopTest, RealEventLoopDeliversPeriodicIrq0) {
  absl::StatusOr<std::unique_ptr<EventLoop>> loop = EventLoop::Create();
  ASSERT_TRUE(loop.ok()) << loop.status();
  EventLoopTimerService timers(loop->get());
  FakeInterruptLine irq;
  PitDevice::Options options;
  options.irq0 = &irq;
  options.timers = &timers;
  std::shared_ptr<PitDevice> pit = PitDevice::Create(options);
  std::shared_ptr<bus::BusDevice> ports = pit->counter_ports();
  const uint8_t program[] = {0x34, 1193 & 0xff, 1193 >> 8};  // 1 kHz
  ports->Write(3, std::span<const uint8_t>(program, 1));
  ports->Write(0, std::span<const uint8_t>(program + 1, 1));
  ports->Write(0, std::span<const uint8_t>(program + 2, 1));
  const int64_t deadline = MonotonicClock::Get().NowNs() + 10'000'000'000;
  while (irq.count() < 5 && MonotonicClock::Get().NowNs() < deadline) {
    ASSERT_TRUE((*loop)->RunOnce(100).ok());
  }
  EXPECT_GE(irq.count(), 5u);
  EXPECT_EQ(pit->metrics().irqs, irq.count());
}

}  // namespace
}  // namespace dsec::devices
