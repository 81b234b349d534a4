// SPDX-License-Identifier: Apache-2.0
// QoS of the daemon's sandboxes through sched/: one node-wide
// PlacementEngine over the host's topology and an Isolator that gives each
// placed sandbox its cpuset (+ cpu weight) cgroup. When sched/ cannot work
// on the host, the placer says why once and every sandbox is reported
// unplaced with that reason: QoS never makes a create fail.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "sched/isolation.h"
#include "sched/placement.h"
#include "sched/topology.h"

namespace dsec::daemon {

// One sandbox's placement. The Service's entry holds it for the sandbox's
// life; destroying it returns the CPUs to the engine. The isolation (its
// cgroup) is shared with the tier sandbox and goes with its last holder.
// Threads: const methods from any thread.
class QosLease {
 public:
  ~QosLease();
  QosLease(const QosLease&) = delete;
  QosLease& operator=(const QosLease&) = delete;

  const sched::Placement& placement() const { return placement_; }
  const std::shared_ptr<const sched::SandboxIsolation>& isolation() const { return isolation_; }
  // The isolation's cpuset cgroup directory ("" with core scheduling).
  std::string CgroupPath() const;
  std::string mechanism() const;  // "cpuset" / "core-sched"

 private:
  friend class QosPlacer;
  QosLease(std::shared_ptr<sched::PlacementEngine> engine, sched::Placement placement,
           std::shared_ptr<const sched::SandboxIsolation> isolation)
      : engine_(std::move(engine)),
        placement_(std::move(placement)),
        isolation_(std::move(isolation)) {}

  std::shared_ptr<sched::PlacementEngine> engine_;
  sched::Placement placement_;
  std::shared_ptr<const sched::SandboxIsolation> isolation_;
};

// What Place decided: a lease, or why there is none.
struct QosDecision {
  std::shared_ptr<QosLease> lease;
  std::string reason;  // set when lease is null
};

struct QosPlacerOptions {
  // BE containers are many and small: far more share a CPU than the
  // engine's default (4, sized for microVM vCPUs) would admit.
  sched::PlacementOptions placement{.be_vcpus_per_cpu = 64};
};

// Threads: any thread (the engine and the isolator are thread-safe).
class QosPlacer {
 public:
  // The host: reads the topology under / and the cgroup layout, and makes
  // an Isolator forced to cpuset partitioning (a core-scheduling cookie
  // lives in the thread that creates it, and the daemon's HTTP threads
  // serve every sandbox). Never fails: what does not work becomes the
  // reason every Place reports, logged once here.
  static std::unique_ptr<QosPlacer> ForHost(QosPlacerOptions options = {});
  // Tests and the above: a given topology and isolator; an error in either
  // makes the placer unavailable with that reason.
  static std::unique_ptr<QosPlacer> Create(absl::StatusOr<sched::Topology> topology,
                                           absl::StatusOr<std::unique_ptr<sched::Isolator>> isolator,
                                           QosPlacerOptions options = {});
  // Unavailable with `reason`.
  static std::unique_ptr<QosPlacer> Unavailable(std::string reason);

  // Places and isolates sandbox `id` ("ls" or "be", `vcpus` CPUs' worth).
  // A refusal (no free whole core for LS, BE slots full, a cgroup error) is
  // a decision without a lease, with the reason.
  QosDecision Place(const std::string& id, const std::string& qos, int vcpus);

  bool available() const { return engine_ != nullptr; }
  // Why placement is off, or the topology and the isolator's mechanism
  // and reason.
  const std::string& status() const { return status_; }

  struct Counts {
    uint64_t placed = 0;
    uint64_t refused = 0;
  };
  Counts counts() const;

 private:
  QosPlacer() = default;

  std::shared_ptr<sched::PlacementEngine> engine_;
  std::unique_ptr<sched::Isolator> isolator_;
  std::string status_;
  mutable absl::Mutex mu_;
  Counts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dsec::daemon
