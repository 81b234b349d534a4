// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/qos_placer.h"

#include "absl/strings/str_cat.h"
#include "sched/cgroup.h"
#include "sched/cpu_list.h"
#include "base/logging.h"

namespace dsec::daemon {

QosLease::~QosLease() {
  if (absl::Status s = engine_->Release(placement_.sandbox); !s.ok()) {
    DSEC_LOG(warn, "daemon: sandbox={} releasing its placement: {}", placement_.sandbox, s.ToString());
  }
}

std::string QosLease::CgroupPath() const {
  const sched::SandboxCgroup* cg = isolation_ ? isolation_->cgroup() : nullptr;
  return cg != nullptr ? cg->cpuset_dir().path() : std::string();
}

std::string QosLease::mechanism() const {
  return isolation_ ? std::string(sched::IsolationMechanismName(isolation_->mechanism())) : "";
}

std::unique_ptr<QosPlacer> QosPlacer::Unavailable(std::string reason) {
  std::unique_ptr<QosPlacer> p(new QosPlacer());
  p->status_ = std::move(reason);
  return p;
}

std::unique_ptr<QosPlacer> QosPlacer::Create(absl::StatusOr<sched::Topology> topology,
                                             absl::StatusOr<std::unique_ptr<sched::Isolator>> isolator,
                                             QosPlacerOptions options) {
  if (!topology.ok()) {
    return Unavailable(absl::StrCat("CPU topology: ", topology.status().message()));
  }
  if (!isolator.ok()) return Unavailable(std::string(isolator.status().message()));
  const std::string shape = topology->Describe();
  auto engine = sched::PlacementEngine::Create(*std::move(topology), options.placement);
  if (!engine.ok()) return Unavailable(absl::StrCat("placement: ", engine.status().message()));
  std::unique_ptr<QosPlacer> p(new QosPlacer());
  p->engine_ = std::shared_ptr<sched::PlacementEngine>(std::move(*engine));
  p->isolator_ = std::move(*isolator);
  p->status_ = absl::StrCat(shape, "; isolation=",
                            std::string(sched::IsolationMechanismName(p->isolator_->mechanism())),
                            ": ", p->isolator_->reason());
  return p;
}

std::unique_ptr<QosPlacer> QosPlacer::ForHost(QosPlacerOptions options) {
  std::unique_ptr<QosPlacer> p;
  auto layout = sched::DetectCgroupLayout();
  if (layout.ok() && layout->cpuset && layout->cpuset->version == sched::CgroupVersion::kV2) {
    // A process has one cgroup in v2: joining a QoS cgroup would take it
    // out of the tier's memory/pids cgroup. Nesting the two is not done.
    p = Unavailable(
        "the cpuset controller is on cgroup v2, where a sandbox's process can be in only one "
        "cgroup: the tiers' memory/pids cgroup and a QoS cpuset cgroup would need nesting, "
        "which this version does not do");
  } else {
    sched::IsolationOptions io;
    io.force = sched::IsolationMechanism::kCpusetPartitioning;
    p = Create(sched::Topology::Read("/"), sched::Isolator::Create(io), std::move(options));
  }
  if (p->available()) {
    DSEC_LOG(info, "daemon: qos placement on: {}", p->status());
  } else {
    DSEC_LOG(warn, "daemon: qos placement off, sandboxes run unplaced: {}", p->status());
  }
  return p;
}

QosPlacer::Counts QosPlacer::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

QosDecision QosPlacer::Place(const std::string& id, const std::string& qos, int vcpus) {
  QosDecision d;
  auto refuse = [&](std::string reason) {
    absl::MutexLock lock(&mu_);
    ++counts_.refused;
    d.reason = std::move(reason);
    return d;
  };
  if (!available()) return refuse(status_);
  auto cls = sched::ParseQosClass(qos);
  if (!cls.ok()) return refuse(std::string(cls.status().message()));
  auto placement = engine_->Place({id, *cls, vcpus});
  if (!placement.ok()) return refuse(absl::StrCat("placement: ", placement.status().message()));
  auto isolation = isolator_->Isolate(*placement);
  if (!isolation.ok()) {
    (void)engine_->Release(id);
    return refuse(std::string(isolation.status().message()));
  }
  DSEC_LOG(debug, "daemon: sandbox={} qos={} cpus={}", id, qos, sched::FormatCpuList(placement->cpus));
  d.lease = std::shared_ptr<QosLease>(new QosLease(
      engine_, *std::move(placement),
      std::shared_ptr<const sched::SandboxIsolation>(std::move(*isolation))));
  absl::MutexLock lock(&mu_);
  ++counts_.placed;
  return d;
}

}  // namespace dsec::daemon
