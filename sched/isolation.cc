// SPDX-License-Identifier: Apache-2.0
#include "sched/isolation.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sched/cpu_list.h"
#include "base/file_io.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::sched {

std::string_view IsolationMechanismName(IsolationMechanism m) {
  return m == IsolationMechanism::kCoreScheduling ? "core-sched" : "cpuset";
}

SandboxIsolation::SandboxIsolation(Placement placement, std::optional<CoreSchedCookie> cookie,
                                   std::unique_ptr<SandboxCgroup> cgroup)
    : placement_(std::move(placement)),
      mechanism_(cookie ? IsolationMechanism::kCoreScheduling
                        : IsolationMechanism::kCpusetPartitioning),
      cookie_(std::move(cookie)),
      cgroup_(std::move(cgroup)) {}

ThreadPlacement SandboxIsolation::ForVcpu(size_t index) const {
  ThreadPlacement t = ForSandboxThread();
  if (!placement_.vcpu_cpus.empty()) {
    t.cpus = {placement_.vcpu_cpus[index % placement_.vcpu_cpus.size()]};
  }
  return t;
}

ThreadPlacement SandboxIsolation::ForSandboxThread() const {
  ThreadPlacement t;
  t.cpus = placement_.cpus;
  t.cookie = cookie();
  t.cgroup = cgroup_.get();
  return t;
}

absl::Status SandboxIsolation::AddProcess(pid_t pid) const {
  if (cgroup_) return cgroup_->AddProcess(pid);
  return cookie_->ShareTo(pid, CoreSchedScope::kThreadGroup);
}

absl::StatusOr<std::unique_ptr<Isolator>> Isolator::Create(IsolationOptions options,
                                                           SchedCoreOps& ops) {
  absl::StatusOr<std::string> self_cgroup = ReadSmallFile("/proc/self/cgroup");
  return CreateWith(std::move(options), ops, DetectCgroupLayout(),
                    self_cgroup.ok() ? *self_cgroup : std::string());
}

absl::StatusOr<std::unique_ptr<Isolator>> Isolator::CreateWith(
    IsolationOptions options, SchedCoreOps& ops, absl::StatusOr<CgroupLayout> layout,
    std::string proc_self_cgroup) {
  std::unique_ptr<Isolator> iso(new Isolator(std::move(options), ops));
  const absl::Status probe = ProbeCoreScheduling(ops);

  // Where sandbox cgroups would go, if the cpuset fallback is possible.
  absl::Status cpuset_status = layout.status();
  std::string cpuset_desc;
  if (layout.ok() && !layout->cpuset) {
    cpuset_status = absl::UnavailableError("no cpuset cgroup controller is mounted (v1 or v2)");
  }
  if (cpuset_status.ok()) {
    const ControllerMount& cs = *layout->cpuset;
    iso->cpuset_parent_ = iso->options_.cpuset_parent;
    if (iso->cpuset_parent_.empty()) {
      auto dir = OwnCgroupDir(cs, proc_self_cgroup, "cpuset");
      if (dir.ok()) iso->cpuset_parent_ = *dir;
      cpuset_status = dir.status();
    }
    if (cpuset_status.ok() && layout->cpu) {
      iso->cpu_parent_ = iso->options_.cpu_parent;
      if (iso->cpu_parent_.empty()) {
        auto dir = OwnCgroupDir(*layout->cpu, proc_self_cgroup, "cpu");
        if (dir.ok()) iso->cpu_parent_ = *dir;
        cpuset_status = dir.status();
      }
    }
    if (cpuset_status.ok()) {
      iso->layout_ = *layout;
      cpuset_desc = absl::StrCat("cpuset controller ", std::string(CgroupVersionName(cs.version)),
                                 " at ", iso->cpuset_parent_);
    }
  }

  const auto force = iso->options_.force;
  if (force == IsolationMechanism::kCoreScheduling ||
      (!force.has_value() && probe.ok())) {
    if (!probe.ok()) return probe;
    iso->mechanism_ = IsolationMechanism::kCoreScheduling;
    iso->reason_ = force ? "forced; the kernel has core scheduling"
                         : "the kernel has core scheduling (PR_SCHED_CORE)";
  } else {
    if (!cpuset_status.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "no CPU isolation mechanism: ",
          probe.ok() ? std::string("core scheduling not chosen") : std::string(probe.message()),
          "; cpuset fallback: ", cpuset_status.message()));
    }
    iso->mechanism_ = IsolationMechanism::kCpusetPartitioning;
    iso->reason_ = absl::StrCat(force ? "forced" : std::string(probe.message()), "; ", cpuset_desc);
  }
  {
    absl::MutexLock lock(&iso->mu_);
    iso->metrics_.mechanism = iso->mechanism_;
    iso->metrics_.core_sched_available = probe.ok();
  }
  DSEC_LOG(info, "sched: isolation={} reason=\"{}\"",
           std::string(IsolationMechanismName(iso->mechanism_)), iso->reason_);
  return iso;
}

absl::StatusOr<std::unique_ptr<SandboxCgroup>> Isolator::MakeCgroup(
    const Placement& placement) const {
  if (!layout_) return absl::UnavailableError("no cpuset cgroup controller for the fallback");
  return SandboxCgroup::Create(*layout_, cpuset_parent_, cpu_parent_, placement,
                               CpuLimitsFor(placement.qos, options_.cpu_limits));
}

absl::StatusOr<std::unique_ptr<SandboxIsolation>> Isolator::Isolate(const Placement& placement) {
  auto fail = [&](absl::Status s) {
    absl::MutexLock lock(&mu_);
    ++metrics_.isolate_failures;
    return Annotate(s, absl::StrCat("isolating sandbox ", placement.sandbox));
  };
  if (mechanism_ == IsolationMechanism::kCoreScheduling) {
    auto cookie = CoreSchedCookie::CreateForCurrentThread(ops_);
    if (cookie.ok()) {
      absl::MutexLock lock(&mu_);
      ++metrics_.sandboxes_core_sched;
      return std::unique_ptr<SandboxIsolation>(
          new SandboxIsolation(placement, std::move(*cookie), nullptr));
    }
    if (!absl::IsUnavailable(cookie.status()) || !layout_) return fail(cookie.status());
    DSEC_LOG(warn, "sched: sandbox={} core scheduling failed ({}); using the cpuset fallback",
             placement.sandbox, std::string(cookie.status().message()));
    absl::MutexLock lock(&mu_);
    ++metrics_.core_sched_fallbacks;
  }
  auto cgroup = MakeCgroup(placement);
  if (!cgroup.ok()) return fail(cgroup.status());
  DSEC_LOG(info, "sched: sandbox={} qos={} cpus={} cgroup={}", placement.sandbox,
           std::string(QosClassName(placement.qos)), FormatCpuList(placement.cpus),
           (*cgroup)->cpuset_dir().path());
  absl::MutexLock lock(&mu_);
  ++metrics_.sandboxes_cpuset;
  return std::unique_ptr<SandboxIsolation>(
      new SandboxIsolation(placement, std::nullopt, std::move(*cgroup)));
}

SchedMetrics Isolator::metrics() const {
  absl::MutexLock lock(&mu_);
  return metrics_;
}

}  // namespace dsec::sched
