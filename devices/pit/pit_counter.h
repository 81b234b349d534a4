// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace dsec::devices {

// One counter of an Intel 8254 programmable interval timer (Intel 8254
// datasheet, order no. 231164, "Operational Description"), computed from
// time instead of a clock input: the counting element's value and OUT are
// derived from the nanoseconds elapsed since the count was loaded, at the
// PC's input clock of 1.193182 MHz. Nothing here owns a host timer; callers
// pass the current time to every call, which keeps this class pure and lets
// tests give exact times.
//
// Modes ("Mode Definitions"): 0 interrupt on terminal count, 1 hardware
// retriggerable one-shot, 2 rate generator, 3 square wave, 4 software
// triggered strobe, 5 hardware triggered strobe; control-word modes 6 and 7
// are 2 and 3 (the datasheet's "X" bit). GATE follows the datasheet's
// "Gate Pin Operations Summary": low suspends counting in modes 0, 2, 3 and 4
// and forces OUT high in 2 and 3; a rising edge restarts modes 2 and 3 and
// triggers modes 1 and 5.
//
// Simplifications, all invisible to software that does not count single
// input clocks: a count takes effect at the write (the datasheet loads it on
// the next CLK pulse); a new count written in mode 2 or 3 restarts the
// period at once instead of at the end of the current one (as KVM and QEMU
// do). BCD counting is supported: counts are four decimal digits, 0 means
// 10^4; a nibble above 9 in a BCD count is taken as 9.
//
// Threads: not thread-safe; PitDevice serialises all calls.
class PitCounter {
 public:
  static constexpr int64_t kFrequencyHz = 1'193'182;

  // How this counter's OUT rising edges recur from now on (used for IRQ0,
  // which the 8259 latches on the rising edge). Times are Clock nanoseconds.
  struct EdgePlan {
    enum class Kind { kNone, kOnce, kPeriodic };
    Kind kind = Kind::kNone;
    int64_t first_edge_ns = 0;
    int64_t period_ns = 0;  // kPeriodic only
    bool operator==(const EdgePlan&) const = default;
  };

  // `gate` is the initial GATE level: counters 0 and 1 of a PC have it tied
  // high, counter 2's comes from port 0x61 bit 0.
  explicit PitCounter(bool gate);

  // A control word addressed to this counter with RW != 0 (port 0x43,
  // "Control Word Format"): sets mode, access and BCD, resets the read and
  // write byte sequence, drops latches and stops counting until a count is
  // written.
  void WriteControl(uint8_t control, int64_t now_ns);
  // Counter latch command (RW = 00) and the read-back command's two halves.
  // A second latch before the first is read is ignored, as on the 8254.
  void LatchCount(int64_t now_ns);
  void LatchStatus(int64_t now_ns);

  // A byte written to the counter's port. Returns true when it started or
  // stopped counting (so that the caller re-plans the interrupt timer).
  bool WriteCount(uint8_t value, int64_t now_ns);
  // A byte read from the counter's port: a latched status first, then a
  // latched count, else the live count, LSB/MSB as programmed.
  uint8_t Read(int64_t now_ns);

  void SetGate(bool level, int64_t now_ns);
  bool gate() const { return gate_; }

  bool Output(int64_t now_ns) const;
  // The counting element as it would be latched now (BCD-encoded in BCD
  // mode), 0..0xffff.
  uint16_t CurrentCount(int64_t now_ns) const;
  // The read-back status byte ("Status Byte"): OUT, NULL COUNT, RW, M, BCD.
  uint8_t Status(int64_t now_ns) const;
  // The effective mode, 0..5.
  int mode() const { return mode_; }

  EdgePlan PlanEdges(int64_t now_ns) const;

  // Snapshot form: every field, with a running counter's start given as the
  // nanoseconds it had run at `now_ns`, so that a restore against another
  // clock resumes counting where it stopped. Restore checks every field
  // (`path` names the counter in errors) and changes nothing on error.
  nlohmann::json Save(int64_t now_ns) const;
  absl::Status Restore(const nlohmann::json& state, const std::string& path, int64_t now_ns);

  static int64_t TicksToNs(uint64_t ticks);
  static uint64_t NsToTicks(int64_t ns);

 private:
  // Access field of the control word (bits 5-4).
  enum Access : uint8_t { kLsb = 1, kMsb = 2, kLsbMsb = 3 };

  // Input clocks counted since the counting element was last loaded.
  uint64_t Elapsed(int64_t now_ns) const;
  // The counting element in binary, 0..modulus-1.
  uint32_t BinaryCount(int64_t now_ns) const;
  uint32_t Modulus() const { return bcd_ ? 10'000 : 65'536; }
  // Decodes a 16-bit count register value: 0 is the modulus.
  uint32_t DecodeCount(uint16_t raw) const;
  // Starts the counting element from `active_` at `now_ns`.
  void Start(int64_t now_ns);
  // Freezes or resumes the elapsed-clock accumulator.
  void Pause(int64_t now_ns);
  void Resume(int64_t now_ns);
  // True if GATE gates counting in the current mode.
  bool GateControlsCounting() const { return mode_ == 0 || mode_ == 2 || mode_ == 3 || mode_ == 4; }
  bool HardwareTriggered() const { return mode_ == 1 || mode_ == 5; }

  int mode_ = 0;
  uint8_t mode_field_ = 0;  // M2..M0 as written, for the status byte
  Access access_ = kLsbMsb;
  bool bcd_ = false;
  bool gate_;

  // Count register (what the guest wrote) and the value the counting element
  // was loaded with (differs in modes 1 and 5 until the next trigger).
  uint32_t reload_ = 65'536;
  uint32_t active_ = 65'536;
  uint8_t pending_lsb_ = 0;
  bool write_msb_next_ = false;
  bool read_msb_next_ = false;

  // "Armed": a complete count was written since the last control word (in
  // modes 1 and 5 the counter then waits for a gate trigger). "Loaded": the
  // counting element holds a count and, gate permitting, counts. Until then
  // it shows `idle_count_` and OUT sits at the mode's initial level.
  bool armed_ = false;
  bool loaded_ = false;
  bool null_count_ = true;
  uint32_t idle_count_ = 0;
  bool running_ = false;
  int64_t run_start_ns_ = 0;
  uint64_t base_ticks_ = 0;  // clocks counted before the last pause

  bool count_latched_ = false;
  uint16_t latched_count_ = 0;
  bool latch_msb_next_ = false;
  bool status_latched_ = false;
  uint8_t latched_status_ = 0;
};

}  // namespace dsec::devices
