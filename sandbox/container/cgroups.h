// SPDX-License-Identifier: Apache-2.0
// A container sandbox's resource cgroups (memory, pids, cpu) on cgroup v1
// or v2, and killing everything inside them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::container {

// Where one controller lives for this process.
struct ControllerDir {
  std::string controller;  // "memory", "pids", "cpu"
  bool v2 = false;
  std::string parent;  // this process's own cgroup directory in that hierarchy
};

// Finds memory, pids and cpu from mountinfo and /proc/self/cgroup text. A v1
// mount names its controllers in its super options; a v2 mount offers those
// in its cgroup.controllers (read through `read_file`, so tests can fake it).
// v1 wins where both exist. A controller found nowhere is left out.
absl::StatusOr<std::vector<ControllerDir>> FindControllers(
    std::string_view mountinfo, std::string_view proc_self_cgroup,
    const std::function<absl::StatusOr<std::string>(const std::string&)>& read_file);

struct ResourceLimits {
  uint64_t memory_bytes = 512ull << 20;  // 0 = unlimited; swap is held to the same
  uint64_t pids_max = 512;               // 0 = unlimited
  uint64_t cpu_shares = 1024;            // v1 cpu.shares; v2 weight is derived
  std::optional<int64_t> cpu_quota_us;   // CFS cap per period
  int64_t cpu_period_us = 100000;
};

// Kills every process in the cgroup directories `dirs` except `keep` (0 =
// none) with SIGKILL, and waits (on pidfds, until `deadline_ns` on
// CLOCK_MONOTONIC) for them to exit; repeats while new ones appear. Returns
// how many were killed; DeadlineExceeded if some survived. `select`, if
// set, limits the kill to the processes it accepts.
absl::StatusOr<int> KillCgroupProcesses(const std::vector<std::string>& dirs, pid_t keep,
                                        int64_t deadline_ns,
                                        const std::function<bool(pid_t)>& select = nullptr);
// The process group of `pid` (from /proc), or 0 if it is gone.
pid_t ProcessGroupOf(pid_t pid);

// The sandbox's cgroup in each controller hierarchy, named "dsec-ctr-<id>",
// and on a hybrid host one in the v2 tree too (no controllers there; the
// sandbox's BPF programs attach to it: Cgroup2DirFor).
// Destruction kills every process left inside and removes the directories
// (unlike sched::CgroupDir, nothing is moved back to the parent: a sandbox's
// processes never outlive it).
// Threads: one owner thread.
class ContainerCgroups {
 public:
  // `skip_cpu`: the cpu controller is managed elsewhere (sched/ QoS).
  // `created`: called with each directory's path just before mkdir, so that
  // the state dir records it before it exists.
  static absl::StatusOr<ContainerCgroups> Create(
      const std::string& id, const ResourceLimits& limits, bool skip_cpu,
      const std::function<absl::Status(const std::string&)>& created);
  // Owns nothing (a placeholder before Create).
  static ContainerCgroups Empty() { return ContainerCgroups({}); }
  ContainerCgroups(ContainerCgroups&& other) noexcept;
  ContainerCgroups& operator=(ContainerCgroups&& other) noexcept;
  ContainerCgroups(const ContainerCgroups&) = delete;
  ContainerCgroups& operator=(const ContainerCgroups&) = delete;
  ~ContainerCgroups();

  absl::Status AddProcess(pid_t pid) const;
  // Writes `limits` (as Create does): for cgroups made ahead of their
  // sandbox (init_pool.h).
  absl::Status ApplyLimits(const ResourceLimits& limits) const;
  // Kills all members except `keep`; see KillCgroupProcesses.
  absl::StatusOr<int> KillAll(pid_t keep, int64_t deadline_ns) const;
  // Kills the members of process group `pgid` and waits for them to exit.
  absl::StatusOr<int> KillGroup(pid_t pgid, int64_t deadline_ns) const;
  // Memory high-water mark since the last ResetPeak (nullopt if unknown).
  std::optional<uint64_t> PeakMemoryBytes() const;
  void ResetPeak() const;
  // Times the OOM killer has fired in the memory cgroup.
  uint64_t OomKills() const;
  // Kills what is left and removes every directory.
  absl::Status Remove();
  // For pools that reuse one cgroup for many runs (sandbox/fncall): change
  // the memory (+memsw) limit or pids.max, read current memory usage, and
  // count how often pids.max refused a fork (pids.events "max").
  absl::Status SetMemoryLimit(uint64_t bytes) const;
  absl::Status SetPidsMax(uint64_t max) const;
  std::optional<uint64_t> MemoryUsageBytes() const;
  uint64_t PidsLimitHits() const;

  const std::vector<std::string>& dirs() const { return dirs_; }

 private:
  struct Dir {
    std::string controller;
    std::string path;
    bool v2;
  };
  explicit ContainerCgroups(std::vector<Dir> dirs);
  const Dir* Find(std::string_view controller) const;
  static absl::Status WriteLimits(const Dir& d, const ResourceLimits& limits);

  std::vector<Dir> dirs_v_;
  std::vector<std::string> dirs_;
};

// Removes one cgroup directory after killing its processes (orphans).
absl::Status KillAndRemoveCgroup(const std::string& dir);

// The cgroup v2 directory holding every process of a sandbox, where its
// BPF programs (bpf/) attach: one of `cgroups` where it has one (a pure v2
// host, or a hybrid one's v2 tree, which holds no controllers but takes
// BPF programs: ContainerCgroups makes it); else one made for it, "dsec-ctr-<id>" in the v2 tree, announced
// to `record` before it exists (so that a killed daemon's successor
// removes it), with `pid` moved in (what it starts follows it); its path
// also in *made for the caller to remove (KillAndRemoveCgroup) after the
// sandbox. Unavailable without a v2 hierarchy.
absl::StatusOr<std::string> Cgroup2DirFor(const ContainerCgroups& cgroups, const std::string& id, pid_t pid,
                                          const std::function<absl::Status(const std::string&)>& record,
                                          std::string* made);

}  // namespace dsec::container
