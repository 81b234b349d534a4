// SPDX-License-Identifier: Apache-2.0
// The reclaim controller: one per node (for now one per `vm run` process),
// over any number of registered VMs. Each Tick() it samples every VM's
// working set, counts refaults of the pages it paged out, reads the guest's
// balloon statistics, asks reclaim_policy what to do, then sets balloon
// targets and pages out cold guest memory with MADV_PAGEOUT (only where the
// host has swap or zram: /proc/swaps). The figure of merit is
// time-integrated memory at a bounded slowdown.
//
// Threads: every method is thread-safe (one mutex). Tick() does the slow work
// (madvise, pagemap reads) and belongs on a thread of its own -- never the
// VM's device event loop -- e.g. ReclaimThread below. Register/Unregister may
// come from an API thread; Unregister waits for a running Tick().
#pragma once

#include <cstdint>
#include <map>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "balloon/damon_sysfs.h"
#include "balloon/host_memory.h"
#include "balloon/pagemap_sampler.h"
#include "balloon/reclaim_policy.h"
#include "balloon/reclaim_vm.h"
#include "balloon/working_set.h"
#include "base/clock.h"
#include "base/event_loop.h"

namespace dsec::balloon {

struct ReclaimControllerOptions {
  ReclaimKnobs knobs;
  const Clock* clock = nullptr;  // nullptr: monotonic; must outlive the controller
  std::string proc_swaps = "/proc/swaps";
  // Paged-out ranges per VM kept for refault accounting (oldest dropped).
  size_t max_tracked_pageouts = 4096;
};

// Per-VM metrics (a snapshot).
struct VmReclaimMetrics {
  uint64_t id = 0;
  std::string name;
  uint64_t resident_bytes = 0;       // host memory of the VM at the last tick
  uint64_t hot_bytes = 0;            // working set estimate at the last tick
  uint64_t cold_bytes = 0;
  uint64_t reclaimed_bytes = 0;      // paged out by the controller (resident drop)
  uint64_t refault_bytes = 0;        // of those, faulted back in
  uint64_t balloon_pages = 0;        // pages in the balloon now
  uint32_t balloon_target_pages = 0;
  uint64_t balloon_released_bytes = 0;  // by inflation and free page reporting
  uint64_t pressure_events = 0;
  uint64_t pageout_pauses = 0;       // ticks held back by max_slowdown
  double slowdown = 0;               // estimated at the last tick
};

class ReclaimController {
 public:
  // `source` may be null (no working-set estimate: balloon only). `ops` acts
  // on this process's memory (ProcSelfMemoryOps, or a fake).
  static absl::StatusOr<std::unique_ptr<ReclaimController>> Create(
      ReclaimControllerOptions options, std::unique_ptr<WorkingSetSource> source,
      std::unique_ptr<HostMemoryOps> ops);
  ~ReclaimController();

  // Starts watching a VM; returns its id. The VM must stay valid until
  // Unregister(id) returns.
  absl::StatusOr<uint64_t> Register(std::shared_ptr<ReclaimVm> vm);
  // Stops watching; does not undo reclaim (the guest faults pages back).
  absl::Status Unregister(uint64_t id);

  void SetKnobs(const ReclaimKnobs& knobs);
  ReclaimKnobs knobs() const;
  std::string source_name() const;
  bool swap_available() const;

  // One round over every VM. Errors of one VM are logged and counted, they
  // do not stop the round; the status reports the first one.
  absl::Status Tick();
  std::vector<VmReclaimMetrics> Metrics() const;

 private:
  struct PagedOut {
    HostRange range;
    uint64_t resident_pages = 0;  // after pageout / at the last check
    // Pages this pageout took out of memory, and how many came back: a range
    // the guest never touched "pages out" nothing, and its first touch
    // later is not a refault.
    uint64_t paged_pages = 0;
    uint64_t refaulted_pages = 0;
  };
  struct Entry {
    std::shared_ptr<ReclaimVm> vm;
    std::vector<HostRange> ram;
    bool tracked = false;  // by the working-set source
    VmPolicyState policy;
    std::vector<PagedOut> paged_out;
    int64_t last_tick_ns = 0;
    VmReclaimMetrics metrics;
  };

  ReclaimController(ReclaimControllerOptions options, std::unique_ptr<WorkingSetSource> source,
                    std::unique_ptr<HostMemoryOps> ops);
  absl::Status TickVm(Entry& e, bool swap, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<uint64_t> ResidentPages(const HostRange& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t CountRefaults(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PageOut(Entry& e, const HostRange& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ReclaimControllerOptions options_;
  const Clock* const clock_;
  mutable absl::Mutex mu_;
  ReclaimKnobs knobs_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<WorkingSetSource> source_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<HostMemoryOps> ops_ ABSL_GUARDED_BY(mu_);
  bool swap_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Entry> vms_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> residency_ ABSL_GUARDED_BY(mu_);
};

// DAMON where this host lets us create our own kdamond (with vaddr), else
// the pagemap sampler; `why` receives the reason DAMON was not used.
absl::StatusOr<std::unique_ptr<WorkingSetSource>> CreateWorkingSetSource(
    HostMemoryOps* ops, const DamonOptions& damon, const PagemapSamplerOptions& sampler,
    std::string* why);

// Runs controller->Tick() every period on a thread of its own (an EventLoop
// with a periodic timer). Destruction stops and joins the thread.
class ReclaimThread {
 public:
  // `on_thread_start` runs first on the new thread (the monitor's jail); if
  // it fails the thread ticks nothing and ends.
  static absl::StatusOr<std::unique_ptr<ReclaimThread>> Start(
      ReclaimController* controller, int64_t period_ns,
      std::function<absl::Status()> on_thread_start = {});
  ~ReclaimThread();

 private:
  explicit ReclaimThread(std::unique_ptr<EventLoop> loop) : loop_(std::move(loop)) {}
  std::unique_ptr<EventLoop> loop_;
  std::thread thread_;
};

}  // namespace dsec::balloon
