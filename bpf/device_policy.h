// SPDX-License-Identifier: Apache-2.0
// A sandbox's device policy in the kernel: device.bpf.c's cgroup_device
// program loaded once per policy, its map of allowed devices, attached to
// one cgroup v2 directory by a link (AttachToCgroup) or to more without one
// (Attach) (on this host the v2
// hierarchy holds no controllers but takes BPF programs; the v1 devices
// controller, where mounted, is checked as well). Every open and mknod of a
// device node not allowed fails with EPERM. The link and the program go
// with the object (detached on destruction).
//
// Called from the thread that owns the sandbox; lives as long as the
// sandbox's cgroup.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bpf/device_rule.h"

struct device;  // the generated skeleton (device.skel.h)
struct bpf_link;

namespace dsec::bpf {

struct DeviceCounters {
  uint64_t allowed = 0;  // device opens and mknods let through
  uint64_t denied = 0;   // refused with EPERM
};

// One attachment of a policy's program to a cgroup (DevicePolicy::Attach):
// destruction detaches it (removing the cgroup does too). Attached without
// a link, so that it holds no descriptor: a node with thousands of
// sandboxes would otherwise keep one open per sandbox. Must not outlive
// its policy.
class DeviceAttachment {
 public:
  DeviceAttachment(int prog_fd, std::string cgroup_dir) : prog_fd_(prog_fd), cgroup_dir_(std::move(cgroup_dir)) {}
  ~DeviceAttachment();
  DeviceAttachment(const DeviceAttachment&) = delete;
  DeviceAttachment& operator=(const DeviceAttachment&) = delete;

 private:
  int prog_fd_;  // the policy's
  std::string cgroup_dir_;
};

class DevicePolicy {
 public:
  // Loads the program with an empty map (every device refused until rules
  // are added). Unavailable, with the kernel's reason, where the kernel
  // refuses BPF or cgroup_device programs.
  static absl::StatusOr<std::unique_ptr<DevicePolicy>> Load();
  ~DevicePolicy();
  DevicePolicy(const DevicePolicy&) = delete;
  DevicePolicy& operator=(const DevicePolicy&) = delete;

  // Attaches the program to a cgroup v2 directory (once per policy).
  // NotFound for a missing directory; Unavailable with the reason when the
  // kernel refuses.
  absl::Status AttachToCgroup(const std::string& cgroup_dir);
  // Attaches the same program (and rules) to one more cgroup: one policy
  // loaded once serves every sandbox that shares it (a tier's default),
  // each attachment of its own (BPF_F_ALLOW_MULTI). Thread-safe; errors as above.
  absl::StatusOr<std::unique_ptr<DeviceAttachment>> Attach(const std::string& cgroup_dir) const;

  // Grants the rule's access; an entry for the same type and numbers keeps
  // what it granted already (access only grows). Effective for the next
  // open or mknod. ResourceExhausted when the map (256 entries) is full.
  absl::Status Allow(const DeviceRule& rule);

  absl::StatusOr<DeviceCounters> Counters() const;

 private:
  explicit DevicePolicy(struct device* skel) : skel_(skel) {}

  struct device* skel_;
  bool attached_ = false;
};

}  // namespace dsec::bpf
