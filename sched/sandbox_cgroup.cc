// SPDX-License-Identifier: Apache-2.0
#include "sched/sandbox_cgroup.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sched/cpu_list.h"
#include "base/file_io.h"
#include "base/status.h"

namespace dsec::sched {

namespace {

// v2 only hands a controller to children that the parent's
// cgroup.subtree_control enables; enable the ones missing.
absl::Status EnableV2Controllers(const std::string& parent, bool cpuset, bool cpu) {
  const std::string control = parent + "/cgroup.subtree_control";
  DSEC_ASSIGN_OR_RETURN(std::string enabled, ReadSmallFile(control));
  std::string want;
  auto has = [&](const char* c) {
    for (size_t pos = 0; (pos = enabled.find(c, pos)) != std::string::npos; ++pos) {
      size_t end = pos + std::string_view(c).size();
      if ((pos == 0 || enabled[pos - 1] == ' ') &&
          (end == enabled.size() || enabled[end] == ' ' || enabled[end] == '\n')) {
        return true;
      }
    }
    return false;
  };
  if (cpuset && !has("cpuset")) want += "+cpuset ";
  if (cpu && !has("cpu")) want += "+cpu ";
  if (want.empty()) return absl::OkStatus();
  want.pop_back();
  return WriteSmallFile(control, want);
}

absl::Status WriteCpuLimits(const CgroupDir& dir, const CpuLimits& limits) {
  if (dir.version() == CgroupVersion::kV1) {
    DSEC_RETURN_IF_ERROR(dir.Write("cpu.shares", absl::StrCat(limits.v1_shares)));
    if (limits.quota_us) {
      DSEC_RETURN_IF_ERROR(dir.Write("cpu.cfs_period_us", absl::StrCat(limits.period_us)));
      DSEC_RETURN_IF_ERROR(dir.Write("cpu.cfs_quota_us", absl::StrCat(*limits.quota_us)));
    }
    return absl::OkStatus();
  }
  DSEC_RETURN_IF_ERROR(dir.Write("cpu.weight", absl::StrCat(limits.v2_weight)));
  if (limits.quota_us) {
    DSEC_RETURN_IF_ERROR(
        dir.Write("cpu.max", absl::StrCat(*limits.quota_us, " ", limits.period_us)));
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t SharesToWeight(uint64_t shares) {
  shares = std::clamp<uint64_t>(shares, 2, 262144);
  return 1 + ((shares - 2) * 9999) / 262142;
}

CpuLimits CpuLimitsFor(QosClass qos, const CpuLimitOptions& options) {
  CpuLimits limits;
  if (qos == QosClass::kBestEffort) {
    limits.v1_shares = std::clamp<uint64_t>(options.be_cpu_shares, 2, 262144);
    limits.v2_weight = SharesToWeight(limits.v1_shares);
    if (options.be_quota_cpus > 0) {
      // The kernel refuses quotas under 1 ms.
      limits.quota_us = std::max<int64_t>(
          1000, std::llround(options.be_quota_cpus * static_cast<double>(limits.period_us)));
    }
  }
  return limits;
}

absl::StatusOr<std::unique_ptr<SandboxCgroup>> SandboxCgroup::Create(
    const CgroupLayout& layout, const std::string& cpuset_parent, const std::string& cpu_parent,
    const Placement& placement, const CpuLimits& limits) {
  if (!layout.cpuset) {
    return absl::UnavailableError("no cpuset cgroup controller is mounted (v1 or v2)");
  }
  if (placement.cpus.empty() || placement.mems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sandbox ", placement.sandbox, ": placement has no CPUs or memory nodes"));
  }
  const CgroupVersion version = layout.cpuset->version;
  const bool cpu_shared_dir =
      layout.cpu && layout.cpu->version == CgroupVersion::kV2 && version == CgroupVersion::kV2;
  if (version == CgroupVersion::kV2) {
    DSEC_RETURN_IF_ERROR(EnableV2Controllers(cpuset_parent, true, cpu_shared_dir));
  }
  const std::string name = RandomCgroupName();
  DSEC_ASSIGN_OR_RETURN(CgroupDir cpuset, CgroupDir::Create(cpuset_parent, name, version));
  // v1 children start with empty cpus/mems and refuse tasks until both are
  // set (ENOSPC otherwise).
  DSEC_RETURN_IF_ERROR(cpuset.Write("cpuset.mems", FormatCpuList(placement.mems)));
  DSEC_RETURN_IF_ERROR(cpuset.Write("cpuset.cpus", FormatCpuList(placement.cpus)));
  if (cpu_shared_dir) DSEC_RETURN_IF_ERROR(WriteCpuLimits(cpuset, limits));

  std::optional<CgroupDir> cpu;
  if (layout.cpu && !cpu_shared_dir) {
    if (layout.cpu->version == CgroupVersion::kV2) {
      DSEC_RETURN_IF_ERROR(EnableV2Controllers(cpu_parent, false, true));
    }
    DSEC_ASSIGN_OR_RETURN(CgroupDir dir, CgroupDir::Create(cpu_parent, name, layout.cpu->version));
    DSEC_RETURN_IF_ERROR(WriteCpuLimits(dir, limits));
    cpu = std::move(dir);
  }
  return std::unique_ptr<SandboxCgroup>(new SandboxCgroup(name, std::move(cpuset), std::move(cpu)));
}

absl::Status SandboxCgroup::AddThread(pid_t tid) const {
  DSEC_RETURN_IF_ERROR(cpuset_.AddThread(tid));
  if (cpu_) DSEC_RETURN_IF_ERROR(cpu_->AddThread(tid));
  return absl::OkStatus();
}

absl::Status SandboxCgroup::AddProcess(pid_t pid) const {
  DSEC_RETURN_IF_ERROR(cpuset_.AddProcess(pid));
  if (cpu_) DSEC_RETURN_IF_ERROR(cpu_->AddProcess(pid));
  return absl::OkStatus();
}

}  // namespace dsec::sched
