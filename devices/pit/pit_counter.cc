// SPDX-License-Identifier: Apache-2.0
#include "devices/pit/pit_counter.h"

#include <algorithm>

#include "base/json_fields.h"
#include "base/status.h"

namespace dsec::devices {
namespace {

constexpr uint64_t kNsPerSecond = 1'000'000'000;

// Status byte bits (8254 datasheet, "Status Byte" figure).
constexpr uint8_t kStatusOutput = 0x80;
constexpr uint8_t kStatusNullCount = 0x40;

uint16_t ToBcd(uint32_t value) {
  uint16_t bcd = 0;
  for (int shift = 0; shift < 16; shift += 4) {
    bcd = static_cast<uint16_t>(bcd | ((value % 10) << shift));
    value /= 10;
  }
  return bcd;
}

}  // namespace

PitCounter::PitCounter(bool gate) : gate_(gate) {}

int64_t PitCounter::TicksToNs(uint64_t ticks) {
  // Rounded up, so that at the returned time the counter has advanced by at
  // least `ticks` clocks: NsToTicks(TicksToNs(t)) == t.
  const unsigned __int128 scaled = static_cast<unsigned __int128>(ticks) * kNsPerSecond;
  return static_cast<int64_t>((scaled + kFrequencyHz - 1) / kFrequencyHz);
}

uint64_t PitCounter::NsToTicks(int64_t ns) {
  if (ns <= 0) return 0;
  const unsigned __int128 scaled = static_cast<unsigned __int128>(ns) * kFrequencyHz;
  return static_cast<uint64_t>(scaled / kNsPerSecond);
}

uint64_t PitCounter::Elapsed(int64_t now_ns) const {
  return base_ticks_ + (running_ ? NsToTicks(now_ns - run_start_ns_) : 0);
}

uint32_t PitCounter::DecodeCount(uint16_t raw) const {
  if (!bcd_) return raw == 0 ? 65'536 : raw;
  uint32_t value = 0;
  for (int shift = 12; shift >= 0; shift -= 4) {
    value = value * 10 + std::min<uint32_t>((raw >> shift) & 0xf, 9);
  }
  return value == 0 ? 10'000 : value;
}

void PitCounter::Start(int64_t now_ns) {
  loaded_ = true;
  null_count_ = false;
  base_ticks_ = 0;
  run_start_ns_ = now_ns;
  running_ = GateControlsCounting() ? gate_ : true;
}

void PitCounter::Pause(int64_t now_ns) {
  if (!running_) return;
  base_ticks_ = Elapsed(now_ns);
  running_ = false;
}

void PitCounter::Resume(int64_t now_ns) {
  if (running_) return;
  run_start_ns_ = now_ns;
  running_ = true;
}

uint32_t PitCounter::BinaryCount(int64_t now_ns) const {
  const uint32_t modulus = Modulus();
  if (!loaded_) return idle_count_ % modulus;
  const uint64_t n = active_;
  const uint64_t d = Elapsed(now_ns);
  switch (mode_) {
    case 2:
      // N, N-1, ..., 1, reload ("Mode 2: Rate Generator").
      return static_cast<uint32_t>((n - d % n) % modulus);
    case 3: {
      // "Mode 3: Square Wave Mode": even N counts N, N-2, ..., 2 in each
      // half; odd N loads N-1 and counts down by two, with the extra clock
      // (count 0) in the high half.
      const uint64_t p = d % n;
      if (n % 2 == 0) return static_cast<uint32_t>((n - 2 * (p % (n / 2))) % modulus);
      const uint64_t high = (n + 1) / 2;
      const uint64_t h = p < high ? p : p - high;
      return static_cast<uint32_t>((n - 1 - 2 * h) % modulus);
    }
    default:
      // Modes 0, 1, 4, 5 count down through zero and wrap around
      // ("the counter continues counting").
      return static_cast<uint32_t>((n + modulus - d % modulus) % modulus);
  }
}

uint16_t PitCounter::CurrentCount(int64_t now_ns) const {
  const uint32_t count = BinaryCount(now_ns);
  return bcd_ ? ToBcd(count) : static_cast<uint16_t>(count);
}

bool PitCounter::Output(int64_t now_ns) const {
  // After a control word OUT goes low in mode 0 and high in every other mode
  // ("Mode Definitions"); a first count byte in mode 0 also drives it low.
  if (!armed_) return mode_ != 0;
  if (!loaded_) return true;  // modes 1 and 5 waiting for a trigger
  const uint64_t n = active_;
  const uint64_t d = Elapsed(now_ns);
  switch (mode_) {
    case 0:
    case 1:
      return d >= n;
    case 2:
      // Low for the one clock in which the count is 1; gate low forces high.
      return !gate_ || n == 1 || d % n != n - 1;
    case 3:
      return !gate_ || d % n < (n + 1) / 2;
    default:
      // Modes 4 and 5: a one-clock low strobe when the count reaches zero.
      return d != n;
  }
}

uint8_t PitCounter::Status(int64_t now_ns) const {
  uint8_t status = static_cast<uint8_t>((access_ << 4) | (mode_field_ << 1) | (bcd_ ? 1 : 0));
  if (Output(now_ns)) status |= kStatusOutput;
  if (null_count_) status |= kStatusNullCount;
  return status;
}

void PitCounter::WriteControl(uint8_t control, int64_t now_ns) {
  // "When a Control Word is written to a Counter, all Control Logic is
  // immediately reset and OUT goes to a known initial state."
  idle_count_ = BinaryCount(now_ns);
  mode_field_ = (control >> 1) & 0x7;
  mode_ = mode_field_ >= 6 ? mode_field_ & 0x3 : mode_field_;
  access_ = static_cast<Access>((control >> 4) & 0x3);
  bcd_ = (control & 0x1) != 0;
  write_msb_next_ = false;
  read_msb_next_ = false;
  count_latched_ = false;
  latch_msb_next_ = false;
  status_latched_ = false;
  armed_ = false;
  loaded_ = false;
  running_ = false;
  base_ticks_ = 0;
  null_count_ = true;
}

bool PitCounter::WriteCount(uint8_t value, int64_t now_ns) {
  uint16_t raw = 0;
  switch (access_) {
    case kLsb:
      raw = value;
      break;
    case kMsb:
      raw = static_cast<uint16_t>(value << 8);
      break;
    case kLsbMsb:
      if (!write_msb_next_) {
        pending_lsb_ = value;
        write_msb_next_ = true;
        // Mode 0: "writing the first byte disables counting. OUT is set low
        // immediately".
        if (mode_ == 0 && armed_) {
          idle_count_ = BinaryCount(now_ns);
          armed_ = false;
          loaded_ = false;
          running_ = false;
          return true;
        }
        return false;
      }
      raw = static_cast<uint16_t>(pending_lsb_ | (value << 8));
      write_msb_next_ = false;
      break;
  }
  reload_ = DecodeCount(raw);
  null_count_ = true;
  armed_ = true;
  if (HardwareTriggered()) {
    // A running one-shot or strobe is not disturbed: the new count is used
    // from the next gate trigger on.
    return true;
  }
  active_ = reload_;
  Start(now_ns);
  return true;
}

void PitCounter::SetGate(bool level, int64_t now_ns) {
  if (level == gate_) return;
  gate_ = level;
  if (!armed_) return;
  switch (mode_) {
    case 0:
    case 4:
      if (!loaded_) return;
      if (level) {
        Resume(now_ns);
      } else {
        Pause(now_ns);
      }
      return;
    case 2:
    case 3:
      // A rising edge reloads the initial count; low stops counting.
      if (level) {
        Start(now_ns);
      } else {
        Pause(now_ns);
      }
      return;
    default:
      // Modes 1 and 5: a rising edge (re)triggers from the count register.
      if (level) {
        active_ = reload_;
        Start(now_ns);
      }
      return;
  }
}

void PitCounter::LatchCount(int64_t now_ns) {
  if (count_latched_) return;
  latched_count_ = CurrentCount(now_ns);
  count_latched_ = true;
  latch_msb_next_ = false;
}

void PitCounter::LatchStatus(int64_t now_ns) {
  if (status_latched_) return;
  latched_status_ = Status(now_ns);
  status_latched_ = true;
}

uint8_t PitCounter::Read(int64_t now_ns) {
  // "If both count and status of a counter are latched, the first read
  // operation of that counter will return latched status".
  if (status_latched_) {
    status_latched_ = false;
    return latched_status_;
  }
  uint16_t count = 0;
  bool msb = false;
  if (count_latched_) {
    count = latched_count_;
    switch (access_) {
      case kLsb:
        count_latched_ = false;
        break;
      case kMsb:
        msb = true;
        count_latched_ = false;
        break;
      case kLsbMsb:
        msb = latch_msb_next_;
        latch_msb_next_ = !latch_msb_next_;
        if (msb) count_latched_ = false;
        break;
    }
  } else {
    count = CurrentCount(now_ns);
    switch (access_) {
      case kLsb:
        break;
      case kMsb:
        msb = true;
        break;
      case kLsbMsb:
        msb = read_msb_next_;
        read_msb_next_ = !read_msb_next_;
        break;
    }
  }
  return static_cast<uint8_t>(msb ? count >> 8 : count & 0xff);
}

PitCounter::EdgePlan PitCounter::PlanEdges(int64_t now_ns) const {
  EdgePlan plan;
  if (!loaded_ || !running_) return plan;
  const uint64_t n = active_;
  const uint64_t d = Elapsed(now_ns);
  // The clock time at which the counting element held its initial count.
  const int64_t anchor_ns = run_start_ns_ - TicksToNs(base_ticks_);
  switch (mode_) {
    case 0:
    case 1:
      // OUT rises at terminal count.
      if (d < n) {
        plan.kind = EdgePlan::Kind::kOnce;
        plan.first_edge_ns = anchor_ns + TicksToNs(n);
      }
      return plan;
    case 4:
    case 5:
      // OUT returns high one clock after terminal count.
      if (d <= n) {
        plan.kind = EdgePlan::Kind::kOnce;
        plan.first_edge_ns = anchor_ns + TicksToNs(n + 1);
      }
      return plan;
    default: {
      // Modes 2 and 3: OUT rises once per period, at the reload. A count of
      // 1 (illegal in mode 2 per the datasheet) is taken as the fastest
      // rate; PitDevice clamps it.
      plan.kind = EdgePlan::Kind::kPeriodic;
      plan.first_edge_ns = anchor_ns + TicksToNs((d / n + 1) * n);
      plan.period_ns = static_cast<int64_t>((n * kNsPerSecond + kFrequencyHz / 2) / kFrequencyHz);
      return plan;
    }
  }
}


nlohmann::json PitCounter::Save(int64_t now_ns) const {
  return {{"mode", mode_},
          {"mode_field", mode_field_},
          {"access", static_cast<int>(access_)},
          {"bcd", bcd_},
          {"gate", gate_},
          {"reload", reload_},
          {"active", active_},
          {"pending_lsb", pending_lsb_},
          {"write_msb_next", write_msb_next_},
          {"read_msb_next", read_msb_next_},
          {"armed", armed_},
          {"loaded", loaded_},
          {"null_count", null_count_},
          {"idle_count", idle_count_},
          {"running", running_},
          {"run_ns", running_ ? std::max<int64_t>(0, now_ns - run_start_ns_) : 0},
          {"base_ticks", base_ticks_},
          {"count_latched", count_latched_},
          {"latched_count", latched_count_},
          {"latch_msb_next", latch_msb_next_},
          {"status_latched", status_latched_},
          {"latched_status", latched_status_}};
}

absl::Status PitCounter::Restore(const nlohmann::json& state, const std::string& path,
                                 int64_t now_ns) {
  // About 245 years of counting: far beyond any guest, and no overflow in
  // the arithmetic on it.
  constexpr uint64_t kMaxNs = uint64_t{1} << 62;
  constexpr uint64_t kMaxTicks = uint64_t{1} << 62;
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(state, path));
  PitCounter c(false);
  DSEC_ASSIGN_OR_RETURN(uint64_t mode, f.Uint("mode", 0, 5));
  DSEC_ASSIGN_OR_RETURN(uint64_t mode_field, f.Uint("mode_field", 0, 7));
  DSEC_ASSIGN_OR_RETURN(uint64_t access, f.Uint("access", kLsb, kLsbMsb));
  DSEC_ASSIGN_OR_RETURN(c.bcd_, f.Bool("bcd"));
  DSEC_ASSIGN_OR_RETURN(c.gate_, f.Bool("gate"));
  DSEC_ASSIGN_OR_RETURN(uint64_t reload, f.Uint("reload", 1, 65'536));
  DSEC_ASSIGN_OR_RETURN(uint64_t active, f.Uint("active", 1, 65'536));
  DSEC_ASSIGN_OR_RETURN(uint64_t pending_lsb, f.Uint("pending_lsb", 0, 0xff));
  DSEC_ASSIGN_OR_RETURN(c.write_msb_next_, f.Bool("write_msb_next"));
  DSEC_ASSIGN_OR_RETURN(c.read_msb_next_, f.Bool("read_msb_next"));
  DSEC_ASSIGN_OR_RETURN(c.armed_, f.Bool("armed"));
  DSEC_ASSIGN_OR_RETURN(c.loaded_, f.Bool("loaded"));
  DSEC_ASSIGN_OR_RETURN(c.null_count_, f.Bool("null_count"));
  DSEC_ASSIGN_OR_RETURN(uint64_t idle_count, f.Uint("idle_count", 0, 65'536));
  DSEC_ASSIGN_OR_RETURN(c.running_, f.Bool("running"));
  DSEC_ASSIGN_OR_RETURN(uint64_t run_ns, f.Uint("run_ns", 0, kMaxNs));
  DSEC_ASSIGN_OR_RETURN(c.base_ticks_, f.Uint("base_ticks", 0, kMaxTicks));
  DSEC_ASSIGN_OR_RETURN(c.count_latched_, f.Bool("count_latched"));
  DSEC_ASSIGN_OR_RETURN(uint64_t latched_count, f.Uint("latched_count", 0, 0xffff));
  DSEC_ASSIGN_OR_RETURN(c.latch_msb_next_, f.Bool("latch_msb_next"));
  DSEC_ASSIGN_OR_RETURN(c.status_latched_, f.Bool("status_latched"));
  DSEC_ASSIGN_OR_RETURN(uint64_t latched_status, f.Uint("latched_status", 0, 0xff));
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  c.mode_ = static_cast<int>(mode);
  c.mode_field_ = static_cast<uint8_t>(mode_field);
  c.access_ = static_cast<Access>(access);
  c.reload_ = static_cast<uint32_t>(reload);
  c.active_ = static_cast<uint32_t>(active);
  c.pending_lsb_ = static_cast<uint8_t>(pending_lsb);
  c.idle_count_ = static_cast<uint32_t>(idle_count);
  c.run_start_ns_ = c.running_ ? now_ns - static_cast<int64_t>(run_ns) : 0;
  c.latched_count_ = static_cast<uint16_t>(latched_count);
  c.latched_status_ = static_cast<uint8_t>(latched_status);
  *this = c;
  return absl::OkStatus();
}
}  // namespace dsec::devices
