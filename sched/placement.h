// SPDX-License-Identifier: Apache-2.0
// QoS classes and the placement engine: which CPUs each sandbox may use.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "sched/topology.h"

namespace dsec::sched {

enum class QosClass {
  kLatencySensitive,  // "ls": whole physical cores, never shared
  kBestEffort,        // "be": packed onto what LS sandboxes leave
};
std::string_view QosClassName(QosClass qos);  // "ls" / "be"
absl::StatusOr<QosClass> ParseQosClass(std::string_view name);

struct PlacementOptions {
  // Never handed out (host housekeeping: the daemon, interrupts).
  std::vector<int> reserved_cpus = {};
  // isolcpus= CPUs are left alone unless the operator opts in: they were
  // isolated for some other purpose, and the scheduler does not balance
  // across them, which a BE sandbox's CPU set relies on.
  bool use_isolated_cpus = false;
  // How many BE vCPUs may share one CPU. BE trades latency for density.
  int be_vcpus_per_cpu = 4;
};

struct PlacementRequest {
  std::string sandbox;  // unique among live placements
  QosClass qos = QosClass::kBestEffort;
  int vcpus = 1;
};

struct Placement {
  std::string sandbox;
  QosClass qos = QosClass::kBestEffort;
  // Every CPU the sandbox may run on, sorted. For LS: all online siblings of
  // the cores it holds, even those no vCPU is pinned to (they stay idle
  // rather than host a stranger).
  std::vector<int> cpus;
  // vcpu_cpus[i]: the CPU vCPU i is pinned to (size == vcpus).
  std::vector<int> vcpu_cpus;
  // NUMA nodes with memory for cpuset.mems: those of `cpus`.
  std::vector<int> mems;
};

struct PlacementMetrics {
  uint64_t ls_placed = 0;
  uint64_t be_placed = 0;
  uint64_t ls_refused = 0;  // ResourceExhausted
  uint64_t be_refused = 0;
  uint64_t released = 0;
  uint64_t ls_cores_in_use = 0;
  uint64_t free_cores = 0;  // whole cores with neither LS nor BE on them
};

// Assigns CPUs to sandboxes:
//  - an LS sandbox gets whole physical cores (every online sibling), none of
//    which holds any other sandbox; it is refused with ResourceExhausted when
//    not enough such cores are free, never given less;
//  - BE sandboxes share the CPUs of cores no LS sandbox holds, filling cores
//    already used by BE first so that whole cores stay free for LS, up to
//    be_vcpus_per_cpu vCPUs per CPU.
// Decisions depend only on the request sequence (deterministic).
// Thread-safe: any thread may call any method.
class PlacementEngine {
 public:
  static absl::StatusOr<std::unique_ptr<PlacementEngine>> Create(Topology topology,
                                                                 PlacementOptions options = {});

  // InvalidArgument (vcpus < 1), AlreadyExists (sandbox placed),
  // ResourceExhausted (cannot honour it).
  absl::StatusOr<Placement> Place(const PlacementRequest& request);
  // Returns the sandbox's CPUs to the pool; NotFound if unknown.
  absl::Status Release(std::string_view sandbox);

  std::optional<Placement> Find(std::string_view sandbox) const;
  std::vector<Placement> Placements() const;
  PlacementMetrics metrics() const;
  const Topology& topology() const { return topology_; }

 private:
  struct CpuState {
    bool usable = false;     // online, not reserved, not isolated (unless allowed)
    std::string ls_owner;    // "" if no LS sandbox holds it
    int be_load = 0;         // BE vCPUs pinned here
  };

  PlacementEngine(Topology topology, PlacementOptions options);
  absl::StatusOr<Placement> PlaceLs(const PlacementRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Placement> PlaceBe(const PlacementRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CoreFree(const PhysicalCore& core) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CoreHasBe(const PhysicalCore& core) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<int> MemsFor(const std::vector<int>& cpus) const;

  const Topology topology_;
  const PlacementOptions options_;
  mutable absl::Mutex mu_;
  std::map<int, CpuState> cpus_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Placement, std::less<>> placements_ ABSL_GUARDED_BY(mu_);
  PlacementMetrics metrics_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dsec::sched
