// SPDX-License-Identifier: Apache-2.0
#include "balloon/reclaim_controller.h"

#include <sys/mman.h>

#include <algorithm>

#include "base/logging.h"
#include "base/status.h"

namespace dsec::balloon {

namespace {
constexpr uint64_t kPage = kHostPageSize;
}  // namespace

ReclaimController::ReclaimController(ReclaimControllerOptions options,
                                     std::unique_ptr<WorkingSetSource> source,
                                     std::unique_ptr<HostMemoryOps> ops)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : &MonotonicClock::Get()),
      knobs_(options_.knobs),
      source_(std::move(source)),
      ops_(std::move(ops)) {}

absl::StatusOr<std::unique_ptr<ReclaimController>> ReclaimController::Create(
    ReclaimControllerOptions options, std::unique_ptr<WorkingSetSource> source,
    std::unique_ptr<HostMemoryOps> ops) {
  if (ops == nullptr) return absl::InvalidArgumentError("reclaim controller: no memory ops");
  if (options.knobs.aggressiveness < 0 || options.knobs.aggressiveness > 1 ||
      options.knobs.max_slowdown < 0) {
    return absl::InvalidArgumentError("reclaim controller: aggressiveness 0..1, max_slowdown >= 0");
  }
  auto c = std::unique_ptr<ReclaimController>(
      new ReclaimController(std::move(options), std::move(source), std::move(ops)));
  absl::StatusOr<SwapSummary> swaps = ReadSwaps(c->options_.proc_swaps);
  absl::MutexLock lock(&c->mu_);
  c->swap_ = swaps.ok() && swaps->available();
  return c;
}

ReclaimController::~ReclaimController() {
  absl::MutexLock lock(&mu_);
  for (auto& [id, e] : vms_) {
    if (e.tracked) source_->Untrack(id);
  }
}

absl::StatusOr<uint64_t> ReclaimController::Register(std::shared_ptr<ReclaimVm> vm) {
  if (vm == nullptr) return absl::InvalidArgumentError("reclaim controller: null VM");
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  Entry e;
  e.vm = std::move(vm);
  e.ram = e.vm->guest_ram();
  e.metrics.id = id;
  e.metrics.name = e.vm->name();
  e.last_tick_ns = clock_->NowNs();
  if (source_ != nullptr) {
    absl::Status s = source_->Track(id, e.vm->pid(), e.ram);
    if (!s.ok()) return Annotate(s, "working-set source");
    e.tracked = true;
  }
  vms_.emplace(id, std::move(e));
  return id;
}

absl::Status ReclaimController::Unregister(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = vms_.find(id);
  if (it == vms_.end()) return absl::NotFoundError("reclaim controller: unknown VM");
  if (it->second.tracked) source_->Untrack(id);
  vms_.erase(it);
  return absl::OkStatus();
}

void ReclaimController::SetKnobs(const ReclaimKnobs& knobs) {
  absl::MutexLock lock(&mu_);
  knobs_ = knobs;
  knobs_.aggressiveness = std::clamp(knobs_.aggressiveness, 0.0, 1.0);
}

ReclaimKnobs ReclaimController::knobs() const {
  absl::MutexLock lock(&mu_);
  return knobs_;
}

std::string ReclaimController::source_name() const {
  absl::MutexLock lock(&mu_);
  return source_ ? std::string(source_->name()) : "none";
}

bool ReclaimController::swap_available() const {
  absl::MutexLock lock(&mu_);
  return swap_;
}

std::vector<VmReclaimMetrics> ReclaimController::Metrics() const {
  absl::MutexLock lock(&mu_);
  std::vector<VmReclaimMetrics> out;
  for (const auto& [id, e] : vms_) out.push_back(e.metrics);
  return out;
}

absl::Status ReclaimController::Tick() {
  absl::MutexLock lock(&mu_);
  // Swap can come and go (a benchmark adds zram): look every round.
  absl::StatusOr<SwapSummary> swaps = ReadSwaps(options_.proc_swaps);
  swap_ = swaps.ok() && swaps->available();
  const int64_t now = clock_->NowNs();
  absl::Status first;
  for (auto& [id, e] : vms_) {
    absl::Status s = TickVm(e, swap_, now);
    if (!s.ok()) {
      DSEC_LOG_RATELIMITED(warn, 1, "component=balloon vm={} reclaim: {}", e.metrics.name,
                           s.ToString());
      if (first.ok()) first = s;
    }
  }
  return first;
}

absl::StatusOr<uint64_t> ReclaimController::ResidentPages(const HostRange& r) {
  residency_.resize(r.size / kPage);
  DSEC_RETURN_IF_ERROR(ops_->Residency(r.addr, residency_));
  uint64_t n = 0;
  for (uint8_t v : residency_) n += v & 1;
  return n;
}

uint64_t ReclaimController::CountRefaults(Entry& e) {
  uint64_t refaulted = 0;
  for (PagedOut& p : e.paged_out) {
    absl::StatusOr<uint64_t> now = ResidentPages(p.range);
    if (!now.ok()) continue;
    // Pages back in memory since the last look: refaults (the guest touched
    // them; nothing else maps guest RAM).
    if (*now > p.resident_pages) {
      const uint64_t back =
          std::min(*now - p.resident_pages, p.paged_pages - p.refaulted_pages);
      p.refaulted_pages += back;
      refaulted += back;
    }
    p.resident_pages = *now;
  }
  // Ranges whose paged-out pages all came back need no more watching.
  std::erase_if(e.paged_out, [](const PagedOut& p) {
    return p.resident_pages == p.range.size / kPage || p.refaulted_pages >= p.paged_pages;
  });
  return refaulted * kPage;
}

void ReclaimController::PageOut(Entry& e, const HostRange& r) {
  absl::StatusOr<uint64_t> before = ResidentPages(r);
  if (!before.ok()) return;
  if (absl::Status s = ops_->Advise(r.addr, r.size, MADV_PAGEOUT); !s.ok()) {
    DSEC_LOG_RATELIMITED(warn, 1, "component=balloon vm={} pageout: {}", e.metrics.name,
                         s.ToString());
    return;
  }
  absl::StatusOr<uint64_t> after = ResidentPages(r);
  if (!after.ok()) return;
  // Re-paging a watched range: keep one record of it.
  std::erase_if(e.paged_out, [&](const PagedOut& p) { return p.range.addr == r.addr; });
  if (*before <= *after) return;  // nothing left memory: nothing to refault
  e.metrics.reclaimed_bytes += (*before - *after) * kPage;
  e.paged_out.push_back({r, *after, *before - *after, 0});
  if (e.paged_out.size() > options_.max_tracked_pageouts) e.paged_out.erase(e.paged_out.begin());
}

absl::Status ReclaimController::TickVm(Entry& e, bool swap, int64_t now) {
  VmObservation obs;
  obs.now_ns = now;
  obs.swap_available = swap;
  obs.interval_ns = now - e.last_tick_ns;
  e.last_tick_ns = now;
  absl::Status status;
  if (e.tracked) {
    absl::StatusOr<WorkingSetSample> ws = source_->Sample(e.metrics.id);
    if (ws.ok()) {
      obs.ws_ok = true;
      obs.ws = std::move(*ws);
      e.metrics.hot_bytes = obs.ws.hot_bytes;
      e.metrics.cold_bytes = obs.ws.cold_bytes();
    } else {
      status = Annotate(ws.status(), "working-set sample");
    }
  }
  obs.refault_bytes = CountRefaults(e);
  e.metrics.refault_bytes += obs.refault_bytes;
  if (absl::StatusOr<uint64_t> rss = e.vm->ResidentBytes(); rss.ok()) {
    e.metrics.resident_bytes = *rss;
    obs.resident_known = true;
    obs.resident_pages = *rss / kPage;
  }
  devices::BalloonControl* balloon = e.vm->balloon();
  if (balloon != nullptr) {
    obs.has_balloon = true;
    obs.driver_active = balloon->driver_active();
    for (const HostRange& r : e.ram) obs.ram_pages += r.size / kPage;
    obs.target_pages = balloon->target_pages();
    obs.balloon_pages = balloon->balloon_pages();
    const devices::BalloonMetrics m = balloon->metrics();
    obs.deflated_unrequested_pages = m.deflated_unrequested_pages;
    obs.stats = balloon->GetStats();
    e.metrics.balloon_released_bytes = m.released_bytes + m.reported_released_bytes;
  }
  PolicyDecision d = DecideReclaim(knobs_, obs, e.policy);
  e.metrics.slowdown = d.slowdown;
  if (d.pressure) ++e.metrics.pressure_events;
  if (d.pageout_paused) ++e.metrics.pageout_pauses;
  if (!d.reason.empty()) {
    DSEC_LOG(debug, "component=balloon vm={} {}", e.metrics.name, d.reason);
  }
  if (balloon != nullptr) {
    if (d.target_pages) balloon->SetTargetPages(*d.target_pages);
    // Fresh statistics for the next tick.
    balloon->RequestStats();
    e.metrics.balloon_pages = balloon->balloon_pages();
    e.metrics.balloon_target_pages = balloon->target_pages();
  }
  for (const HostRange& r : d.pageout) PageOut(e, r);
  return status;
}

absl::StatusOr<std::unique_ptr<WorkingSetSource>> CreateWorkingSetSource(
    HostMemoryOps* ops, const DamonOptions& damon, const PagemapSamplerOptions& sampler,
    std::string* why) {
  absl::StatusOr<std::unique_ptr<DamonSysfsSource>> d = DamonSysfsSource::Create(damon);
  if (d.ok()) return std::unique_ptr<WorkingSetSource>(std::move(*d));
  if (why != nullptr) *why = d.status().ToString();
  DSEC_LOG(info, "component=balloon working set from the pagemap sampler: DAMON {}",
           d.status().ToString());
  DSEC_ASSIGN_OR_RETURN(auto s, PagemapSampler::Create(ops, sampler));
  return std::unique_ptr<WorkingSetSource>(std::move(s));
}

absl::StatusOr<std::unique_ptr<ReclaimThread>> ReclaimThread::Start(
    ReclaimController* controller, int64_t period_ns, std::function<absl::Status()> on_thread_start) {
  if (controller == nullptr || period_ns <= 0) {
    return absl::InvalidArgumentError("reclaim thread: controller and period required");
  }
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<EventLoop> loop, EventLoop::Create());
  DSEC_RETURN_IF_ERROR(
      loop->AddTimer(period_ns, period_ns, [controller] { (void)controller->Tick(); }).status());
  std::unique_ptr<ReclaimThread> t(new ReclaimThread(std::move(loop)));
  EventLoop* raw = t->loop_.get();
  t->thread_ = std::thread([raw, hook = std::move(on_thread_start)] {
    if (hook && !hook().ok()) return;
    (void)raw->Run();
  });
  return t;
}

ReclaimThread::~ReclaimThread() {
  loop_->Stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace dsec::balloon
