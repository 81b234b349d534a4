// SPDX-License-Identifier: Apache-2.0
// The cpuset fallback for one sandbox: its own cgroup(s) confining it to
// its placement's CPUs and memory nodes, with a CPU weight by QoS class.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "sched/cgroup.h"
#include "sched/placement.h"

namespace dsec::sched {

struct CpuLimits {
  uint64_t v1_shares = 1024;  // cpu.shares (default 1024)
  uint64_t v2_weight = 100;   // cpu.weight (default 100)
  // CFS bandwidth cap in microseconds per period; nullopt = no cap.
  std::optional<int64_t> quota_us;
  int64_t period_us = 100000;
};

struct CpuLimitOptions {
  // BE runs at a low weight so that, on CPUs it shares with the host or
  // other BE sandboxes, it yields; LS keeps the default (its cores are its
  // own, so its weight only matters against host threads).
  uint64_t be_cpu_shares = 64;
  // > 0: BE is capped at this many CPUs' worth of time per period, on top
  // of its weight (operators who sell BE by the core-second).
  double be_quota_cpus = 0;
};

// v2 weight for a v1 shares value, the mapping systemd and Kubernetes use
// (2..262144 onto 1..10000), so both hierarchies rank sandboxes alike.
uint64_t SharesToWeight(uint64_t shares);
CpuLimits CpuLimitsFor(QosClass qos, const CpuLimitOptions& options);

// Owns the sandbox's cgroup in the cpuset hierarchy and, on v1 where cpu is
// a separate hierarchy, its twin there (same random name). Both are removed
// on destruction, tasks first moved back to the parents.
// Threads: created by one thread; AddThread may be called from any thread
// (each is one write to cgroupfs).
class SandboxCgroup {
 public:
  // `cpuset_parent` / `cpu_parent`: directories in the respective
  // hierarchies under which to create the sandbox's cgroup.
  static absl::StatusOr<std::unique_ptr<SandboxCgroup>> Create(
      const CgroupLayout& layout, const std::string& cpuset_parent,
      const std::string& cpu_parent, const Placement& placement, const CpuLimits& limits);

  // Moves one thread in (v2: its whole process, see CgroupDir::AddThread).
  absl::Status AddThread(pid_t tid) const;
  absl::Status AddProcess(pid_t pid) const;

  const std::string& name() const { return name_; }
  const CgroupDir& cpuset_dir() const { return cpuset_; }
  // The cpu-controller cgroup when it is a separate v1 directory.
  const CgroupDir* cpu_dir() const { return cpu_ ? &*cpu_ : nullptr; }

 private:
  SandboxCgroup(std::string name, CgroupDir cpuset, std::optional<CgroupDir> cpu)
      : name_(std::move(name)), cpuset_(std::move(cpuset)), cpu_(std::move(cpu)) {}

  std::string name_;
  CgroupDir cpuset_;
  std::optional<CgroupDir> cpu_;
};

}  // namespace dsec::sched
