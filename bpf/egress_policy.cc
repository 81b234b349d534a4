// SPDX-License-Identifier: Apache-2.0
#include "bpf/egress_policy.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/scoped_fd.h"
#include "bpf/egress.skel.h"

namespace dsec::bpf {

namespace {

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
  ScopedFd dir(open(cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) {
    return absl::NotFoundError(absl::StrCat("egress policy: opening cgroup ", cgroup_dir, ": ", Errno(errno)));
  }
  struct {
    struct bpf_program* prog;
    struct bpf_link** link;
  } progs[] = {
      {skel_->progs.dsec_connect4, &skel_->links.dsec_connect4},
      {skel_->progs.dsec_sendmsg4, &skel_->links.dsec_sendmsg4},
      {skel_->progs.dsec_connect6, &skel_->links.dsec_connect6},
      {skel_->progs.dsec_sendmsg6, &skel_->links.dsec_sendmsg6},
      {skel_->progs.dsec_skb_egress, &skel_->links.dsec_skb_egress},
  };
  for (auto& p : progs) {
    struct bpf_link* link = bpf_program__attach_cgroup(p.prog, dir.get());
    if (link == nullptr) {
      const int err = errno;
      for (auto& q : progs) {  // all or nothing
        if (*q.link != nullptr) {
          bpf_link__destroy(*q.link);
          *q.link = nullptr;
        }
      }
      return absl::UnavailableError(absl::StrCat("egress policy: attaching ", bpf_program__name(p.prog),
                                                 " to cgroup ", cgroup_dir, ": ", Errno(err)));
    }
    *p.link = link;
  }
  attached_ = true;
  return absl::OkStatus();
}

absl::Status EgressPolicy::Update(bool allow, const EgressRule& rule, bool add) {
  struct bpf_map* map = rule.ipv6 ? (allow ? skel_->maps.allow6 : skel_->maps.deny6)
                                  : (allow ? skel_->maps.allow4 : skel_->maps.deny4);
  const std::vector<uint8_t> key = EgressRuleKey(rule);
  const uint8_t one = 1;
  const int err = add ? bpf_map__update_elem(map, key.data(), key.size(), &one, sizeof(one), BPF_ANY)
                      : bpf_map__delete_elem(map, key.data(), key.size(), 0);
  if (err != 0) {
    if (!add && (err == -ENOENT || errno == ENOENT)) {
      return absl::NotFoundError(absl::StrCat("egress policy: no ", allow ? "allow" : "deny", " rule ",
                                              FormatEgressRule(rule)));
    }
    if (err == -E2BIG || err == -ENOSPC || errno == E2BIG || errno == ENOSPC) {
      return absl::ResourceExhaustedError(absl::StrCat("egress policy: the ", allow ? "allow" : "deny",
                                                       " list is full (", bpf_map__max_entries(map),
                                                       " rules)"));
    }
    return absl::InternalError(absl::StrCat("egress policy: ", add ? "adding" : "removing", " rule ",
                                            FormatEgressRule(rule), ": ", Errno(err)));
  }
  return absl::OkStatus();
}

absl::Status EgressPolicy::Allow(const EgressRule& rule) { return Update(true, rule, true); }
absl::Status EgressPolicy::Deny(const EgressRule& rule) { return Update(false, rule, true); }
absl::Status EgressPolicy::RemoveAllow(const EgressRule& rule) { return Update(true, rule, false); }
absl::Status EgressPolicy::RemoveDeny(const EgressRule& rule) { return Update(false, rule, false); }

absl::StatusOr<EgressCounters> EgressPolicy::Counters() const {
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return absl::InternalError(absl::StrCat("egress policy: possible CPUs: ", Errno(ncpu)));
  EgressCounters out;
  uint64_t* fields[] = {&out.allowed, &out.denied, &out.packets_allowed, &out.packets_dropped};
  for (uint32_t k = 0; k < 4; ++k) {
    std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu));
    if (const int err = bpf_map__lookup_elem(skel_->maps.counters, &k, sizeof(k), per_cpu.data(),
                                             per_cpu.size() * sizeof(uint64_t), 0);
        err != 0) {
      return absl::InternalError(absl::StrCat("egress policy: reading counters: ", Errno(err)));
    }
    uint64_t sum = 0;
    for (uint64_t v : per_cpu) sum += v;
    *fields[k] = sum;
  }
  return out;
}

}  // namespace dsec::bpf
