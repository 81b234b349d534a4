// SPDX-License-Identifier: Apache-2.0
#include "bpf/device_policy.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/scoped_fd.h"
#include "base/status.h"
#include "bpf/cgroup_attach.h"
#include "bpf/device.skel.h"
#include "bpf/rule_maps.h"

namespace dsec::bpf {

namespace {

constexpr std::string_view kOwner = "device policy";

std::string Errno(int err) { return std::strerror(err < 0 ? -err : err); }

}  // namespace

absl::StatusOr<std::unique_ptr<DevicePolicy>> DevicePolicy::Load() {
  struct device* skel = device__open();
  if (skel == nullptr) {
    return absl::UnavailableError(absl::StrCat("device policy: opening the BPF object: ", Errno(errno)));
  }
  if (const int err = device__load(skel); err != 0) {
    device__destroy(skel);
    return absl::UnavailableError(
        absl::StrCat("device policy: the kernel refused the cgroup_device program: ", Errno(err)));
  }
  return std::unique_ptr<DevicePolicy>(new DevicePolicy(skel));
}

DevicePolicy::~DevicePolicy() { device__destroy(skel_); }  // detaches the link too

absl::Status DevicePolicy::AttachToCgroup(const std::string& cgroup_dir) {
  if (attached_) return absl::FailedPreconditionError("device policy: already attached");
  const CgroupProgram progs[] = {{skel_->progs.dsec_device, &skel_->links.dsec_device}};
  DSEC_RETURN_IF_ERROR(AttachAllToCgroup(progs, cgroup_dir, kOwner));
  attached_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceAttachment>> DevicePolicy::Attach(const std::string& cgroup_dir) const {
  ScopedFd dir(open(cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) {
    return absl::NotFoundError(absl::StrCat("device policy: opening cgroup ", cgroup_dir, ": ", Errno(errno)));
  }
  const int prog = bpf_program__fd(skel_->progs.dsec_device);
  if (const int err = bpf_prog_attach(prog, dir.get(), BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI); err != 0) {
    return absl::UnavailableError(
        absl::StrCat("device policy: attaching to cgroup ", cgroup_dir, ": ", Errno(-err)));
  }
  return std::make_unique<DeviceAttachment>(prog, cgroup_dir);
}

DeviceAttachment::~DeviceAttachment() {
  // A cgroup already removed took its programs with it.
  ScopedFd dir(open(cgroup_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.valid()) (void)bpf_prog_detach2(prog_fd_, dir.get(), BPF_CGROUP_DEVICE);
}

absl::Status DevicePolicy::Allow(const DeviceRule& rule) {
  if (rule.access == 0 || (rule.access & ~(kDeviceRead | kDeviceWrite | kDeviceMknod)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device policy: rule ", FormatDeviceRule(rule), " has no valid access bits"));
  }
  const DeviceKey key = DeviceRuleKey(rule);
  uint32_t access = 0;
  // Only this object writes the map, from one thread: read-merge-write is
  // not racing another writer.
  if (bpf_map__lookup_elem(skel_->maps.rules, &key, sizeof(key), &access, sizeof(access), 0) != 0) {
    access = 0;
  }
  access |= rule.access;
  if (const int err =
          bpf_map__update_elem(skel_->maps.rules, &key, sizeof(key), &access, sizeof(access), BPF_ANY);
      err != 0) {
    if (err == -E2BIG || err == -ENOSPC) {
      return absl::ResourceExhaustedError(absl::StrCat("device policy: the device list is full (",
                                                       bpf_map__max_entries(skel_->maps.rules), " rules)"));
    }
    return absl::InternalError(
        absl::StrCat("device policy: adding rule ", FormatDeviceRule(rule), ": ", Errno(err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceCounters> DevicePolicy::Counters() const {
  DSEC_ASSIGN_OR_RETURN(const std::vector<uint64_t> c, SumPerCpuCounters(skel_->maps.counters, 2, kOwner));
  return DeviceCounters{.allowed = c[0], .denied = c[1]};
}

}  // namespace dsec::bpf
