// SPDX-License-Identifier: Apache-2.0
#include "bpf/egress_policy.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "bpf/cgroup_attach.h"
#include "bpf/egress.skel.h"
#include "bpf/rule_maps.h"

namespace dsec::bpf {

namespace {

constexpr std::string_view kOwner = "egress policy";

std::string Errno(int err) { return std::strerror(err < 0 ? -err : err); }

}  // namespace

absl::StatusOr<std::unique_ptr<EgressPolicy>> EgressPolicy::Load() {
  struct egress* skel = egress__open();
  if (skel == nullptr) {
    return absl::UnavailableError(absl::StrCat("egress policy: opening the BPF object: ", Errno(errno)));
  }
  if (const int err = egress__load(skel); err != 0) {
    egress__destroy(skel);
    return absl::UnavailableError(absl::StrCat(
        "egress policy: the kernel refused the cgroup programs (sock_addr connect4/6, sendmsg4/6; "
        "cgroup_skb egress): ",
        Errno(err)));
  }
  return std::unique_ptr<EgressPolicy>(new EgressPolicy(skel));
}

EgressPolicy::~EgressPolicy() { egress__destroy(skel_); }  // detaches the links too

absl::Status EgressPolicy::AttachToCgroup(const std::string& cgroup_dir) {
  if (attached_) return absl::FailedPreconditionError("egress policy: already attached");
  const CgroupProgram progs[] = {
      {skel_->progs.dsec_connect4, &skel_->links.dsec_connect4},
      {skel_->progs.dsec_sendmsg4, &skel_->links.dsec_sendmsg4},
      {skel_->progs.dsec_connect6, &skel_->links.dsec_connect6},
      {skel_->progs.dsec_sendmsg6, &skel_->links.dsec_sendmsg6},
      {skel_->progs.dsec_skb_egress, &skel_->links.dsec_skb_egress},
  };
  DSEC_RETURN_IF_ERROR(AttachAllToCgroup(progs, cgroup_dir, kOwner));
  attached_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CgroupLinks>> EgressPolicy::Attach(const std::string& cgroup_dir) const {
  struct bpf_program* const progs[] = {skel_->progs.dsec_connect4, skel_->progs.dsec_sendmsg4,
                                       skel_->progs.dsec_connect6, skel_->progs.dsec_sendmsg6,
                                       skel_->progs.dsec_skb_egress};
  return AttachEachToCgroup(progs, cgroup_dir, kOwner);
}

absl::Status EgressPolicy::Allow(const EgressRule& rule) { return RuleLists::Of(skel_, kOwner).Allow(rule); }
absl::Status EgressPolicy::Deny(const EgressRule& rule) { return RuleLists::Of(skel_, kOwner).Deny(rule); }
absl::Status EgressPolicy::RemoveAllow(const EgressRule& rule) {
  return RuleLists::Of(skel_, kOwner).RemoveAllow(rule);
}
absl::Status EgressPolicy::RemoveDeny(const EgressRule& rule) {
  return RuleLists::Of(skel_, kOwner).RemoveDeny(rule);
}

absl::StatusOr<EgressCounters> EgressPolicy::Counters() const {
  DSEC_ASSIGN_OR_RETURN(const std::vector<uint64_t> c, SumPerCpuCounters(skel_->maps.counters, 4, kOwner));
  return EgressCounters{.allowed = c[0], .denied = c[1], .packets_allowed = c[2], .packets_dropped = c[3]};
}

}  // namespace dsec::bpf
