// SPDX-License-Identifier: Apache-2.0
// A sandbox's egress policy in the kernel: egress.bpf.c's cgroup programs
// (connect4/6, sendmsg4/6, and cgroup_skb egress as a second wall for raw
// sockets and ICMP) loaded once per policy, their allow and deny
// maps, and the links that attach them to a cgroup v2 directory (one, or
// several: Attach). The links and the programs go with the object
// (detached on destruction).
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bpf/cgroup_attach.h"
#include "bpf/egress_rule.h"

struct egress;  // the generated skeleton (egress.skel.h)

namespace dsec::bpf {

struct EgressCounters {
  uint64_t allowed = 0;  // connects and sendmsgs let through
  uint64_t denied = 0;   // refused with EPERM
  // The cgroup_skb wall: IP packets sent by the cgroup's sockets.
  uint64_t packets_allowed = 0;
  uint64_t packets_dropped = 0;
};

class EgressPolicy {
 public:
  // Loads the programs and empty maps (everything refused until rules are
  // added). Unavailable, with the kernel's reason, where the kernel refuses
  // BPF or these program types.
  static absl::StatusOr<std::unique_ptr<EgressPolicy>> Load();
  ~EgressPolicy();
  EgressPolicy(const EgressPolicy&) = delete;
  EgressPolicy& operator=(const EgressPolicy&) = delete;

  // Attaches the five programs to a cgroup v2 directory (all or none, once
  // per policy).
  // Unavailable with the reason when the kernel refuses.
  absl::Status AttachToCgroup(const std::string& cgroup_dir);
  // Attaches the same programs (and so the same rules and counters) to one
  // more cgroup: a sandbox whose processes sit in several cgroups (the
  // fncall tier's workers) has one policy. Destroying the result detaches
  // them from that cgroup; it must not outlive the policy. Thread-safe;
  // errors as above.
  absl::StatusOr<std::unique_ptr<CgroupLinks>> Attach(const std::string& cgroup_dir) const;

  // Rules take effect at once: for the next connect()/sendmsg(), and for
  // the next packet of connections already open (the cgroup_skb wall).
  absl::Status Allow(const EgressRule& rule);
  absl::Status Deny(const EgressRule& rule);
  absl::Status RemoveAllow(const EgressRule& rule);
  absl::Status RemoveDeny(const EgressRule& rule);

  absl::StatusOr<EgressCounters> Counters() const;

 private:
  explicit EgressPolicy(struct egress* skel) : skel_(skel) {}

  struct egress* skel_;
  bool attached_ = false;
};

}  // namespace dsec::bpf
