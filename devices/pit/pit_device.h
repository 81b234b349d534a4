// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "absl/synchronization/mutex.h"
#include "platform/interrupt/interrupt_line.h"
#include "devices/pit/pit_counter.h"
#include "devices/pit/timer_service.h"
#include "base/clock.h"
#include "platform/bus/bus.h"

namespace dsec::devices {

// A PC's Intel 8254 PIT in userspace, in place of KVM's in-kernel PIT (whose
// teardown waits two SRCU grace periods at VM close), plus the PC AT's port
// 0x61 ("system control port B" / NMI status and control), which carries
// counter 2's GATE and OUT.
//
// Ports: counters 0-2 at 0x40-0x42, the control word register at 0x43
// (write-only; reads return 0xff), all behind counter_ports(), to be mapped
// at 0x40 with length 4; port_b() is mapped at 0x61 with length 1. Both are
// views of one device and keep it alive. Port 0x61 bits (IBM PC AT Technical
// Reference, "System Control Port B"): write bit 0 = counter 2 GATE, bit 1 =
// speaker data enable, bits 2-3 = parity/channel check enables (stored and
// read back, no NMI is ever raised); read adds bit 4 = refresh request
// toggle, which flips on every read so that BIOS and Linux delay loops that
// wait for it to change always make progress, and bit 5 = counter 2 OUT.
// Bits 6-7 (parity/channel check) read 0. No sound is produced.
//
// Counts are computed from `clock` (see PitCounter); no host timer is needed
// to read them. Only counter 0's OUT is wired to an interrupt (IRQ0, the
// InterruptLine given): when counter 0 is programmed, the device arms a
// timer on the event loop for OUT's rising edges, periodic in modes 2 and 3,
// one-shot in modes 0 and 4 (Linux's i8253 clockevent uses mode 2 and, for
// one-shot, mode 4), and each expiry pulses the line once. Ticks the loop
// misses are not re-injected (as KVM's PIT with reinject off, QEMU's
// lost_tick_policy=discard): a late loop delivers one interrupt and the next
// expiry stays on the programmed grid. Periodic rates above `max_irq_hz` are
// clamped to it and counted (a count of 1 would be 1.19 MHz of interrupts).
// Counter 1 (DRAM refresh on a PC) counts but drives nothing.
//
// Threads: the bus views are called on vCPU threads, concurrently; all
// counter state is behind one mutex. Timer work runs on the loop thread:
// register writes that change counter 0's plan bump a generation and Post()
// a task that cancels and re-arms the loop timer. Tasks and timers hold only
// a weak reference, so the device may be destroyed before the loop; an
// expiry of a superseded plan raises nothing.
class PitDevice : public std::enable_shared_from_this<PitDevice> {
 public:
  static constexpr uint64_t kCounterPortsBase = 0x40;
  static constexpr uint64_t kCounterPortsLength = 4;
  static constexpr uint64_t kPortB = 0x61;
  static constexpr uint64_t kPortBLength = 1;
  static constexpr uint32_t kDefaultMaxIrqHz = 10'000;

  struct Options {
    const Clock* clock = &MonotonicClock::Get();
    // IRQ0 and the loop that times it; both null for a PIT whose counter 0
    // raises no interrupts. Both must outlive the device's use of them (the
    // timer service: until the loop stops running).
    InterruptLine* irq0 = nullptr;
    TimerService* timers = nullptr;
    uint32_t max_irq_hz = kDefaultMaxIrqHz;
  };

  struct Metrics {
    uint64_t irqs = 0;          // IRQ0 pulses raised
    uint64_t irq_errors = 0;    // pulses the InterruptLine refused
    uint64_t reprograms = 0;    // changes of counter 0's interrupt plan
    uint64_t clamped = 0;       // plans whose period was raised to 1/max_irq_hz
    uint64_t timer_errors = 0;  // loop timers that could not be armed
  };

  // Always owned by a shared_ptr (timer callbacks hold weak references).
  static std::shared_ptr<PitDevice> Create(Options options);

  std::shared_ptr<bus::BusDevice> counter_ports();
  std::shared_ptr<bus::BusDevice> port_b();

  Metrics metrics() const;

  // Snapshots (vmm/vm): the three counters and port B as JSON (times
  // relative to now, so that a restore resumes counting where the snapshot
  // stopped), and back into a device no vCPU uses yet; every field checked.
  // A restore re-arms counter 0's interrupt timer on the loop.
  nlohmann::json SaveState() const;
  absl::Status RestoreState(const nlohmann::json& state);

 private:
  class CounterPorts : public bus::BusDevice {
   public:
    explicit CounterPorts(PitDevice* pit) : pit_(pit) {}
    void Read(uint64_t offset, std::span<uint8_t> data) override;
    void Write(uint64_t offset, std::span<const uint8_t> data) override;

   private:
    PitDevice* const pit_;
  };
  class PortB : public bus::BusDevice {
   public:
    explicit PortB(PitDevice* pit) : pit_(pit) {}
    void Read(uint64_t offset, std::span<uint8_t> data) override;
    void Write(uint64_t offset, std::span<const uint8_t> data) override;

   private:
    PitDevice* const pit_;
  };

  explicit PitDevice(const Options& options);

  uint8_t ReadCounterPort(uint64_t port) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Both return true when counter 0's interrupt plan must be recomputed.
  bool WriteCounterPort(uint64_t port, uint8_t value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool WriteControlWord(uint8_t value, int64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recomputes the plan and bumps its generation.
  void Replan(int64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PostSync();

  // Loop thread only.
  void SyncTimer();
  void OnTimer(uint64_t generation, bool once);

  const Clock* const clock_;
  InterruptLine* const irq0_;
  TimerService* const timers_;
  const int64_t min_period_ns_;
  CounterPorts counter_ports_{this};
  PortB port_b_{this};

  mutable absl::Mutex mu_;
  std::array<PitCounter, 3> counters_ ABSL_GUARDED_BY(mu_){
      PitCounter(true), PitCounter(true), PitCounter(false)};
  uint8_t port_b_bits_ ABSL_GUARDED_BY(mu_) = 0;  // bits 3:0 as written
  bool refresh_toggle_ ABSL_GUARDED_BY(mu_) = false;
  PitCounter::EdgePlan plan_ ABSL_GUARDED_BY(mu_);
  uint64_t plan_generation_ ABSL_GUARDED_BY(mu_) = 0;

  // Loop thread only: the timer armed for plan generation armed_generation_
  // (-1: none, or a one-shot that has fired).
  int armed_timer_ = -1;
  uint64_t armed_generation_ = 0;

  std::atomic<uint64_t> irqs_{0};
  std::atomic<uint64_t> irq_errors_{0};
  std::atomic<uint64_t> reprograms_{0};
  std::atomic<uint64_t> clamped_{0};
  std::atomic<uint64_t> timer_errors_{0};
};

}  // namespace dsec::devices
