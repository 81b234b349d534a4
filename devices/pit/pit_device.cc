// SPDX-License-Identifier: Apache-2.0
#include "devices/pit/pit_device.h"

#include <algorithm>
#include <utility>

#include "base/json_fields.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::devices {
namespace {

constexpr uint64_t kControlPort = 3;  // 0x43

// Control word (8254 datasheet, "Control Word Format"): SC1-SC0 in bits 7-6
// (3 = read-back command), RW1-RW0 in bits 5-4 (0 = counter latch command).
constexpr int kSelectReadBack = 3;
// Read-back command ("Read-Back Command Format"): bit 5 = /COUNT, bit 4 =
// /STATUS (active low), bits 3-1 select counters 2, 1, 0.
constexpr uint8_t kReadBackNoCount = 0x20;
constexpr uint8_t kReadBackNoStatus = 0x10;

// Port 0x61 (PC AT system control port B).
constexpr uint8_t kPortBWritable = 0x0f;   // gate 2, speaker, parity/IOCHK enables
constexpr uint8_t kPortBGate2 = 0x01;
constexpr uint8_t kPortBRefresh = 0x10;
constexpr uint8_t kPortBOut2 = 0x20;

constexpr int64_t kNsPerSecond = 1'000'000'000;

}  // namespace

std::shared_ptr<PitDevice> PitDevice::Create(Options options) {
  DSEC_CHECK((options.irq0 == nullptr) == (options.timers == nullptr));
  DSEC_CHECK(options.clock != nullptr && options.max_irq_hz > 0);
  return std::shared_ptr<PitDevice>(new PitDevice(options));
}

PitDevice::PitDevice(const Options& options)
    : clock_(options.clock),
      irq0_(options.irq0),
      timers_(options.timers),
      min_period_ns_((kNsPerSecond + options.max_irq_hz - 1) / options.max_irq_hz) {}

std::shared_ptr<bus::BusDevice> PitDevice::counter_ports() {
  // Aliasing constructor: the view shares ownership of the whole device.
  return std::shared_ptr<bus::BusDevice>(shared_from_this(), &counter_ports_);
}

std::shared_ptr<bus::BusDevice> PitDevice::port_b() {
  return std::shared_ptr<bus::BusDevice>(shared_from_this(), &port_b_);
}

PitDevice::Metrics PitDevice::metrics() const {
  Metrics m;
  m.irqs = irqs_.load(std::memory_order_relaxed);
  m.irq_errors = irq_errors_.load(std::memory_order_relaxed);
  m.reprograms = reprograms_.load(std::memory_order_relaxed);
  m.clamped = clamped_.load(std::memory_order_relaxed);
  m.timer_errors = timer_errors_.load(std::memory_order_relaxed);
  return m;
}

// --- vCPU side --------------------------------------------------------------

void PitDevice::CounterPorts::Read(uint64_t offset, std::span<uint8_t> data) {
  absl::MutexLock lock(&pit_->mu_);
  for (size_t i = 0; i < data.size(); ++i) data[i] = pit_->ReadCounterPort(offset + i);
}

void PitDevice::CounterPorts::Write(uint64_t offset, std::span<const uint8_t> data) {
  bool replanned = false;
  {
    absl::MutexLock lock(&pit_->mu_);
    for (size_t i = 0; i < data.size(); ++i) {
      replanned |= pit_->WriteCounterPort(offset + i, data[i]);
    }
  }
  if (replanned) pit_->PostSync();
}

void PitDevice::PortB::Read(uint64_t offset, std::span<uint8_t> data) {
  absl::MutexLock lock(&pit_->mu_);
  const int64_t now = pit_->clock_->NowNs();
  for (size_t i = 0; i < data.size(); ++i) {
    if (offset + i != 0) {
      data[i] = 0xff;
      continue;
    }
    pit_->refresh_toggle_ = !pit_->refresh_toggle_;
    uint8_t value = pit_->port_b_bits_;
    if (pit_->refresh_toggle_) value |= kPortBRefresh;
    if (pit_->counters_[2].Output(now)) value |= kPortBOut2;
    data[i] = value;
  }
}

void PitDevice::PortB::Write(uint64_t offset, std::span<const uint8_t> data) {
  if (offset != 0 || data.empty()) return;
  absl::MutexLock lock(&pit_->mu_);
  pit_->port_b_bits_ = data[0] & kPortBWritable;
  pit_->counters_[2].SetGate((data[0] & kPortBGate2) != 0, pit_->clock_->NowNs());
}

uint8_t PitDevice::ReadCounterPort(uint64_t port) {
  // The control word register cannot be read; the 8254 leaves the data bus
  // floating, which reads as all-ones on a PC.
  if (port >= kControlPort) return 0xff;
  return counters_[port].Read(clock_->NowNs());
}

bool PitDevice::WriteCounterPort(uint64_t port, uint8_t value) {
  const int64_t now = clock_->NowNs();
  bool replan = false;
  if (port < kControlPort) {
    replan = counters_[port].WriteCount(value, now) && port == 0;
  } else if (port == kControlPort) {
    replan = WriteControlWord(value, now);
  }
  if (replan) Replan(now);
  return replan && timers_ != nullptr;
}

bool PitDevice::WriteControlWord(uint8_t value, int64_t now_ns) {
  const int select = value >> 6;
  if (select == kSelectReadBack) {
    for (int i = 0; i < 3; ++i) {
      if ((value & (2 << i)) == 0) continue;
      if ((value & kReadBackNoCount) == 0) counters_[i].LatchCount(now_ns);
      if ((value & kReadBackNoStatus) == 0) counters_[i].LatchStatus(now_ns);
    }
    return false;
  }
  if (((value >> 4) & 0x3) == 0) {
    counters_[select].LatchCount(now_ns);
    return false;
  }
  counters_[select].WriteControl(value, now_ns);
  return select == 0;
}

void PitDevice::Replan(int64_t now_ns) {
  if (timers_ == nullptr) return;
  PitCounter::EdgePlan plan = counters_[0].PlanEdges(now_ns);
  if (plan.kind == PitCounter::EdgePlan::Kind::kPeriodic && plan.period_ns < min_period_ns_) {
    plan.period_ns = min_period_ns_;
    plan.first_edge_ns = std::max(plan.first_edge_ns, now_ns + min_period_ns_);
    clamped_.fetch_add(1, std::memory_order_relaxed);
  }
  plan_ = plan;
  ++plan_generation_;
  reprograms_.fetch_add(1, std::memory_order_relaxed);
}

void PitDevice::PostSync() {
  timers_->Post([weak = weak_from_this()] {
    if (auto self = weak.lock()) self->SyncTimer();
  });
}

// --- loop side --------------------------------------------------------------

void PitDevice::SyncTimer() {
  PitCounter::EdgePlan plan;
  uint64_t generation = 0;
  int64_t now = 0;
  {
    absl::MutexLock lock(&mu_);
    plan = plan_;
    generation = plan_generation_;
    now = clock_->NowNs();
  }
  // Several writes may have posted a sync; the first one does the work.
  if (generation == armed_generation_) return;
  if (armed_timer_ >= 0) {
    (void)timers_->CancelTimer(armed_timer_);
    armed_timer_ = -1;
  }
  armed_generation_ = generation;
  if (plan.kind == PitCounter::EdgePlan::Kind::kNone) return;

  const bool once = plan.kind == PitCounter::EdgePlan::Kind::kOnce;
  int64_t first = plan.first_edge_ns - now;
  if (!once && first <= 0) {
    // The loop ran late: skip the edges already past (not re-injected).
    first += ((-first) / plan.period_ns + 1) * plan.period_ns;
  }
  first = std::max<int64_t>(first, 1);
  absl::StatusOr<int> id = timers_->AddTimer(
      first, once ? 0 : plan.period_ns, [weak = weak_from_this(), generation, once] {
        if (auto self = weak.lock()) self->OnTimer(generation, once);
      });
  if (!id.ok()) {
    timer_errors_.fetch_add(1, std::memory_order_relaxed);
    DSEC_LOG_RATELIMITED(err, 1, "device=pit irq0 timer not armed: {}", id.status().ToString());
    return;
  }
  armed_timer_ = *id;
}

void PitDevice::OnTimer(uint64_t generation, bool once) {
  // The loop drops a one-shot timer once it has fired.
  if (once && generation == armed_generation_) armed_timer_ = -1;
  {
    absl::MutexLock lock(&mu_);
    // Reprogrammed since this timer was armed; the pending sync re-arms.
    if (generation != plan_generation_) return;
  }
  irqs_.fetch_add(1, std::memory_order_relaxed);
  absl::Status s = irq0_->Trigger();
  if (!s.ok()) {
    irq_errors_.fetch_add(1, std::memory_order_relaxed);
    DSEC_LOG_RATELIMITED(err, 1, "device=pit irq0 not raised: {}", s.ToString());
  }
}


nlohmann::json PitDevice::SaveState() const {
  absl::MutexLock lock(&mu_);
  const int64_t now = clock_->NowNs();
  nlohmann::json counters = nlohmann::json::array();
  for (const PitCounter& c : counters_) counters.push_back(c.Save(now));
  return {{"counters", std::move(counters)},
          {"port_b", port_b_bits_},
          {"refresh_toggle", refresh_toggle_}};
}

absl::Status PitDevice::RestoreState(const nlohmann::json& state) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(state, "pit"));
  const nlohmann::json* counters = f.Raw("counters");
  const std::string path = f.Path("counters");
  if (counters == nullptr || !counters->is_array() || counters->size() != 3) {
    return InvalidField(path, path + " must be a list of 3 counters");
  }
  DSEC_ASSIGN_OR_RETURN(uint64_t port_b, f.Uint("port_b", 0, 0x0f));
  DSEC_ASSIGN_OR_RETURN(bool refresh_toggle, f.Bool("refresh_toggle"));
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  {
    absl::MutexLock lock(&mu_);
    const int64_t now = clock_->NowNs();
    std::array<PitCounter, 3> restored = counters_;
    for (size_t i = 0; i < 3; ++i) {
      DSEC_RETURN_IF_ERROR(
          restored[i].Restore((*counters)[i], JsonFields::ItemPath(path, i), now));
    }
    counters_ = restored;
    port_b_bits_ = static_cast<uint8_t>(port_b);
    refresh_toggle_ = refresh_toggle;
    Replan(now);
  }
  if (timers_ != nullptr) PostSync();
  return absl::OkStatus();
}
}  // namespace dsec::devices
