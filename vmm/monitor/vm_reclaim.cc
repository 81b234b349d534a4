// SPDX-License-Identifier: Apache-2.0
#include "vmm/monitor/vm_reclaim.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "balloon/host_memory.h"
#include "balloon/pagemap_sampler.h"
#include "balloon/proc_memory.h"
#include "devices/balloon/balloon_control.h"
#include "base/clock.h"
#include "base/status.h"
#include "vmm/vm/reclaim_vm_adapter.h"
#include "vmm/vm/virtio_devices.h"

namespace dsec::monitor {

namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kPagesPerMiB = kMiB / 4096;

const char* StatName(size_t tag) {
  static constexpr const char* kNames[devices::kBalloonStatTagCount] = {
      "swap_in",   "swap_out",  "major_faults", "minor_faults",       "free_memory",
      "total_memory", "available_memory", "disk_caches", "hugetlb_allocations",
      "hugetlb_failures"};
  return tag < devices::kBalloonStatTagCount ? kNames[tag] : "unknown";
}

nlohmann::json BalloonJson(devices::BalloonControl& b) {
  const devices::BalloonMetrics m = b.metrics();
  nlohmann::json j{
      {"target_pages", b.target_pages()},
      {"actual_pages", b.actual_pages()},
      {"balloon_pages", b.balloon_pages()},
      {"balloon_bytes", b.balloon_pages() * 4096},
      {"driver_active", b.driver_active()},
      {"stats_enabled", b.stats_enabled()},
      {"metrics",
       {{"inflated_pages", m.inflated_pages},
        {"deflated_pages", m.deflated_pages},
        {"deflated_unrequested_pages", m.deflated_unrequested_pages},
        {"released_bytes", m.released_bytes},
        {"reported_pages", m.reported_pages},
        {"reported_released_bytes", m.reported_released_bytes},
        {"refused_total", m.refused_total()},
        {"throttled", m.throttled},
        {"bad_requests", m.bad_requests},
        {"release_errors", m.release_errors},
        {"stats_updates", m.stats_updates}}},
  };
  std::optional<devices::BalloonStatsSample> s = b.GetStats();
  if (s) {
    nlohmann::json g{{"sequence", s->sequence},
                     {"age_ms", (MonotonicClock::Get().NowNs() - s->received_ns) / 1'000'000}};
    for (size_t t = 0; t < devices::kBalloonStatTagCount; ++t) {
      const auto tag = static_cast<devices::BalloonStatTag>(t);
      if (s->stats.Has(tag)) g[StatName(t)] = s->stats.Get(tag);
    }
    j["guest_stats"] = g;
  } else {
    j["guest_stats"] = nullptr;
  }
  return j;
}

nlohmann::json VmMetricsJson(const balloon::VmReclaimMetrics& m) {
  return nlohmann::json{{"name", m.name},
                        {"resident_bytes", m.resident_bytes},
                        {"hot_bytes", m.hot_bytes},
                        {"cold_bytes", m.cold_bytes},
                        {"reclaimed_bytes", m.reclaimed_bytes},
                        {"refault_bytes", m.refault_bytes},
                        {"balloon_pages", m.balloon_pages},
                        {"balloon_target_pages", m.balloon_target_pages},
                        {"balloon_released_bytes", m.balloon_released_bytes},
                        {"pressure_events", m.pressure_events},
                        {"pageout_pauses", m.pageout_pauses},
                        {"slowdown", m.slowdown}};
}

}  // namespace

absl::StatusOr<ReclaimMode> ParseReclaimMode(std::string_view name) {
  if (name == "off") return ReclaimMode::kOff;
  if (name == "balloon") return ReclaimMode::kBalloon;
  if (name == "pageout") return ReclaimMode::kPageout;
  if (name == "both") return ReclaimMode::kBoth;
  return absl::InvalidArgumentError(
      absl::StrCat("--reclaim: unknown mode '", std::string(name), "' (off, balloon, pageout, both)"));
}

std::string_view ReclaimModeName(ReclaimMode mode) {
  switch (mode) {
    case ReclaimMode::kOff:
      return "off";
    case ReclaimMode::kBalloon:
      return "balloon";
    case ReclaimMode::kPageout:
      return "pageout";
    case ReclaimMode::kBoth:
      return "both";
  }
  return "off";
}

absl::StatusOr<std::unique_ptr<VmReclaim>> VmReclaim::Start(
    const vm::Vm& vm, const ReclaimRunOptions& options,
    std::function<absl::Status()> on_thread_start) {
  DSEC_ASSIGN_OR_RETURN(ReclaimMode mode, ParseReclaimMode(options.mode));
  if (mode == ReclaimMode::kOff) return absl::InvalidArgumentError("reclaim is off");
  const bool use_balloon = mode == ReclaimMode::kBalloon || mode == ReclaimMode::kBoth;
  const bool use_pageout = mode == ReclaimMode::kPageout || mode == ReclaimMode::kBoth;
  if (use_balloon && vm.virtio()->Find<devices::BalloonControl>() == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--reclaim ", options.mode, " needs a balloon device (--balloon)"));
  }
  if (options.interval_ms <= 0) {
    return absl::InvalidArgumentError("--reclaim-interval-ms must be > 0");
  }
  std::unique_ptr<VmReclaim> r(new VmReclaim());
  r->mode_ = mode;
  balloon::ReclaimControllerOptions co;
  co.knobs = options.knobs;
  co.knobs.balloon = use_balloon;
  co.knobs.pageout = use_pageout;
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<balloon::ProcSelfMemoryOps> ops,
                        balloon::ProcSelfMemoryOps::Create());
  std::unique_ptr<balloon::WorkingSetSource> source;
  if (use_pageout) {
    // The sampler keeps a pointer to the ops, which the controller owns and
    // destroys after the source.
    if (options.try_damon) {
      DSEC_ASSIGN_OR_RETURN(source, balloon::CreateWorkingSetSource(ops.get(), {}, {},
                                                                    &r->source_why_));
    } else {
      r->source_why_ = "not tried: the monitor drops its uid (DAMON's sysfs is root's)";
      DSEC_ASSIGN_OR_RETURN(source, balloon::PagemapSampler::Create(ops.get(), {}));
    }
  }
  DSEC_ASSIGN_OR_RETURN(r->controller_, balloon::ReclaimController::Create(
                                            co, std::move(source), std::move(ops)));
  DSEC_ASSIGN_OR_RETURN(r->id_, r->controller_->Register(std::make_shared<vm::VmReclaimAdapter>(
                                    &vm, absl::StrCat("vm-", ::getpid()))));
  DSEC_ASSIGN_OR_RETURN(r->thread_, balloon::ReclaimThread::Start(
                                        r->controller_.get(), options.interval_ms * 1'000'000,
                                        std::move(on_thread_start)));
  return r;
}

VmReclaim::~VmReclaim() {
  Stop();
  if (controller_ != nullptr && id_ != 0) (void)controller_->Unregister(id_);
}

void VmReclaim::Stop() { thread_.reset(); }

nlohmann::json VmReclaim::MetricsJson() const {
  const balloon::ReclaimKnobs k = controller_->knobs();
  nlohmann::json j{
      {"mode", std::string(ReclaimModeName(mode_))},
      {"source", controller_->source_name()},
      {"swap_available", controller_->swap_available()},
      {"knobs",
       {{"min_free_mib", k.min_free_mib},
        {"aggressiveness", k.aggressiveness},
        {"max_slowdown", k.max_slowdown}}},
  };
  if (!source_why_.empty()) j["damon_unavailable"] = source_why_;
  std::vector<balloon::VmReclaimMetrics> ms = controller_->Metrics();
  j["vm"] = ms.empty() ? nlohmann::json(nullptr) : VmMetricsJson(ms.front());
  return j;
}

absl::StatusOr<nlohmann::json> HandleVmControl(vm::Vm& vm, VmReclaim* reclaim,
                                               const api::ControlRequest& request,
                                               int snapshot_dir_fd) {
  devices::BalloonControl* b = vm.virtio()->Find<devices::BalloonControl>();
  const uint64_t ram_mib = vm.memory().TotalSize() / kMiB;
  switch (request.op) {
    case api::ControlRequest::Op::kStats: {
      nlohmann::json j{{"ok", true}, {"paused", vm.paused()}, {"guest_mem_bytes", vm.memory().TotalSize()}};
      absl::StatusOr<uint64_t> resident = vm.memory().ResidentBytes();
      j["guest_resident_bytes"] = resident.ok() ? nlohmann::json(*resident) : nlohmann::json(nullptr);
      absl::StatusOr<balloon::ProcessMemory> pm = balloon::ReadProcessMemory(::getpid());
      if (pm.ok()) {
        j["process"] = {{"vm_rss", pm->vm_rss},
                        {"rss_anon", pm->rss_anon},
                        {"rss_file", pm->rss_file},
                        {"rss_shmem", pm->rss_shmem}};
      }
      j["balloon"] = b != nullptr ? BalloonJson(*b) : nlohmann::json(nullptr);
      j["reclaim"] = reclaim != nullptr ? reclaim->MetricsJson() : nlohmann::json(nullptr);
      return j;
    }
    case api::ControlRequest::Op::kBalloon: {
      if (b == nullptr) {
        return absl::FailedPreconditionError("this VM has no balloon device (start it with --balloon)");
      }
      if (request.target_mib > ram_mib) {
        return absl::InvalidArgumentError(
            absl::StrCat("target_mib ", request.target_mib, " exceeds guest RAM (", ram_mib, " MiB)"));
      }
      const uint32_t pages = static_cast<uint32_t>(request.target_mib * kPagesPerMiB);
      b->SetTargetPages(pages);
      nlohmann::json j{{"ok", true}, {"target_pages", pages}, {"balloon_pages", b->balloon_pages()}};
      if (reclaim != nullptr &&
          (reclaim->mode() == ReclaimMode::kBalloon || reclaim->mode() == ReclaimMode::kBoth)) {
        j["note"] = "the reclaim controller also sets the balloon target and may change it";
      }
      return j;
    }
    case api::ControlRequest::Op::kPause:
      if (!vm.paused()) DSEC_RETURN_IF_ERROR(vm.Pause());
      return nlohmann::json{{"ok", true}, {"paused", true}};
    case api::ControlRequest::Op::kResume:
      if (vm.paused()) DSEC_RETURN_IF_ERROR(vm.Resume());
      return nlohmann::json{{"ok", true}, {"paused", false}};
    case api::ControlRequest::Op::kSnapshot: {
      if (snapshot_dir_fd < 0) {
        return absl::FailedPreconditionError(
            "snapshots are off: start the monitor with --snapshot-dir DIR");
      }
      // Paused for the snapshot, then as it was.
      const bool was_paused = vm.paused();
      if (!was_paused) DSEC_RETURN_IF_ERROR(vm.Pause());
      absl::StatusOr<vm::SnapshotResult> r = vm.SaveSnapshot(snapshot_dir_fd, request.diff);
      if (!was_paused) (void)vm.Resume();
      if (!r.ok()) return r.status();
      return nlohmann::json{{"ok", true},
                            {"paused", was_paused},
                            {"diff", request.diff},
                            {"memory_bytes", r->memory_bytes},
                            {"memory_bytes_written", r->memory_bytes_written},
                            {"manifest_bytes", r->manifest_bytes},
                            {"capture_ms", r->capture_ns / 1e6},
                            {"memory_ms", r->memory_ns / 1e6},
                            {"total_ms", r->total_ns / 1e6}};
    }
  }
  return absl::InternalError("unhandled control op");
}

}  // namespace dsec::monitor
