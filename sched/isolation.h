// SPDX-License-Identifier: Apache-2.0
// Choosing and applying the isolation mechanism: core scheduling where the
// kernel has it, otherwise sibling partitioning with cpuset cgroups.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "sched/cgroup.h"
#include "sched/core_sched.h"
#include "sched/placement.h"
#include "sched/sandbox_cgroup.h"
#include "sched/thread_placement.h"

namespace dsec::sched {

enum class IsolationMechanism {
  kCoreScheduling,      // one PR_SCHED_CORE cookie per sandbox, plus affinity
  kCpusetPartitioning,  // one cpuset (+cpu weight) cgroup per sandbox, plus affinity
};
std::string_view IsolationMechanismName(IsolationMechanism m);  // "core-sched" / "cpuset"

// Counters for the metrics endpoint (Prometheus text is rendered by the API).
struct SchedMetrics {
  IsolationMechanism mechanism = IsolationMechanism::kCpusetPartitioning;
  bool core_sched_available = false;
  uint64_t sandboxes_core_sched = 0;
  uint64_t sandboxes_cpuset = 0;
  // Sandboxes that fell back to cpusets because creating a cookie failed
  // after the start-up probe had succeeded.
  uint64_t core_sched_fallbacks = 0;
  uint64_t isolate_failures = 0;
};

struct IsolationOptions {
  // Benchmarks compare both mechanisms; production leaves this unset.
  std::optional<IsolationMechanism> force;
  // Parents for sandbox cgroups; "" = this process's own cgroup in that
  // hierarchy (from /proc/self/cgroup).
  std::string cpuset_parent;
  std::string cpu_parent;
  CpuLimitOptions cpu_limits;
};

// The isolation one sandbox got. Owns its cookie or cgroup; destroying it
// removes the cgroup (threads still inside are moved to the parent) -- so it
// must outlive the sandbox's threads' use of the ThreadPlacements it hands
// out.
// Threads: created by Isolator::Isolate on the sandbox's owner thread;
// const methods may be called from any thread (vCPU threads call
// ApplyToCurrentThread(ForVcpu(i)) on themselves).
class SandboxIsolation {
 public:
  IsolationMechanism mechanism() const { return mechanism_; }
  const Placement& placement() const { return placement_; }
  // vCPU `index` pinned to its one CPU (index >= vcpus wraps around).
  ThreadPlacement ForVcpu(size_t index) const;
  // Any other thread of the sandbox (event loop, I/O): all its CPUs.
  ThreadPlacement ForSandboxThread() const;
  // A container's process before exec: cgroup.procs, or the cookie pushed
  // to its whole thread group (the caller must carry the cookie, as the
  // thread that created it does).
  absl::Status AddProcess(pid_t pid) const;

  const CoreSchedCookie* cookie() const { return cookie_ ? &*cookie_ : nullptr; }
  const SandboxCgroup* cgroup() const { return cgroup_.get(); }

 private:
  friend class Isolator;
  SandboxIsolation(Placement placement, std::optional<CoreSchedCookie> cookie,
                   std::unique_ptr<SandboxCgroup> cgroup);

  Placement placement_;
  IsolationMechanism mechanism_;
  std::optional<CoreSchedCookie> cookie_;
  std::unique_ptr<SandboxCgroup> cgroup_;
};

// Decides the mechanism once at start-up (probe PR_SCHED_CORE; find the
// cpuset controller), logs the choice, and isolates sandboxes with it.
// Thread-safe.
class Isolator {
 public:
  static absl::StatusOr<std::unique_ptr<Isolator>> Create(
      IsolationOptions options = {}, SchedCoreOps& ops = SystemSchedCoreOps());
  // The same with the host facts injected (tests): the cgroup layout (or
  // the error finding it) and /proc/self/cgroup's text.
  static absl::StatusOr<std::unique_ptr<Isolator>> CreateWith(
      IsolationOptions options, SchedCoreOps& ops, absl::StatusOr<CgroupLayout> layout,
      std::string proc_self_cgroup);

  IsolationMechanism mechanism() const { return mechanism_; }
  // Why this mechanism, e.g. "kernel lacks core scheduling (...); cpuset
  // controller v1 at /sys/fs/cgroup/cpuset".
  const std::string& reason() const { return reason_; }

  // Core scheduling: creates the sandbox's cookie on the calling thread
  // (which carries it from then on: call it on the sandbox's own main
  // thread). If that fails with Unavailable, this sandbox falls back to a
  // cpuset cgroup. Cpuset partitioning: creates the sandbox's cgroup.
  absl::StatusOr<std::unique_ptr<SandboxIsolation>> Isolate(const Placement& placement);

  SchedMetrics metrics() const;

 private:
  Isolator(IsolationOptions options, SchedCoreOps& ops) : options_(std::move(options)), ops_(ops) {}
  absl::StatusOr<std::unique_ptr<SandboxCgroup>> MakeCgroup(const Placement& placement) const;

  const IsolationOptions options_;
  SchedCoreOps& ops_;
  IsolationMechanism mechanism_ = IsolationMechanism::kCpusetPartitioning;
  std::string reason_;
  std::optional<CgroupLayout> layout_;  // set when a cpuset controller exists
  std::string cpuset_parent_, cpu_parent_;
  mutable absl::Mutex mu_;
  SchedMetrics metrics_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dsec::sched
