// SPDX-License-Identifier: Apache-2.0
// The host's CPU topology as sysfs describes it: online CPUs, physical cores
// and their SMT siblings, packages, NUMA nodes, isolated CPUs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::sched {

// One online logical CPU.
struct CpuInfo {
  int cpu = 0;
  int core_id = 0;     // topology/core_id (unique only within a package)
  int package_id = 0;  // topology/physical_package_id
  int node = 0;        // NUMA node whose cpulist holds this CPU
  int core = 0;        // index into Topology::cores()
};

// One physical core: the online CPUs that share its execution units.
struct PhysicalCore {
  int index = 0;  // position in Topology::cores(), ordered by lowest CPU
  int package_id = 0;
  int core_id = 0;
  int node = 0;
  std::vector<int> cpus;  // sorted online SMT siblings, never empty
};

// An immutable snapshot, read once at start-up (CPU hotplug while a node
// runs sandboxes is not supported: placements would point at dead CPUs).
// Thread-safe to share after Read() returns.
class Topology {
 public:
  // Reads <root>/sys/devices/system/{cpu,node}. `root` is "/" on a real host
  // and a fake tree in tests. Missing, partial or malformed files ->
  // InvalidArgument naming the file; there is no guessing at a shape.
  static absl::StatusOr<Topology> Read(const std::string& root = "/");

  const std::vector<int>& online_cpus() const { return online_; }
  // Indexed in the order of online_cpus().
  const std::vector<CpuInfo>& cpus() const { return cpus_; }
  const std::vector<PhysicalCore>& cores() const { return cores_; }
  // Node number -> its online CPUs (memory-only nodes map to an empty list).
  const std::map<int, std::vector<int>>& nodes() const { return nodes_; }
  // Nodes with memory: what cpuset.mems may name.
  const std::vector<int>& memory_nodes() const { return memory_nodes_; }
  // CPUs taken out of the scheduler's balancing (isolcpus=), online ones only.
  const std::vector<int>& isolated_cpus() const { return isolated_; }

  // The CpuInfo of an online CPU, or nullptr.
  const CpuInfo* Find(int cpu) const;
  // True if any physical core has more than one online CPU.
  bool smt() const;
  // One line for logs: "cpus=0-3 cores=2 packages=1 nodes=1 smt=yes isolated=".
  std::string Describe() const;

 private:
  Topology() = default;

  std::vector<int> online_;
  std::vector<CpuInfo> cpus_;
  std::vector<PhysicalCore> cores_;
  std::map<int, std::vector<int>> nodes_;
  std::vector<int> memory_nodes_;
  std::vector<int> isolated_;
};

}  // namespace dsec::sched
