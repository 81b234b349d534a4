// SPDX-License-Identifier: Apache-2.0
#include "bpf/tap_filter.h"

#include <bpf/bpf.h>
#include <arpa/inet.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "bpf/rule_maps.h"
#include "bpf/tap.skel.h"

namespace dsec::bpf {

namespace {

constexpr std::string_view kOwner = "tap filter";
constexpr char kThreadNetns[] = "/proc/thread-self/ns/net";

std::string Errno(int err) { return std::strerror(err < 0 ? -err : err); }

struct bpf_tc_hook IngressHook(int ifindex) {
  struct bpf_tc_hook hook = {};
  hook.sz = sizeof(hook);
  hook.ifindex = ifindex;
  hook.attach_point = BPF_TC_INGRESS;
  return hook;
}

bool SameNamespace(int a, int b) {
  struct stat sa, sb;
  return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TapFilter>> TapFilter::Load() {
  struct tap* skel = tap__open();
  if (skel == nullptr) {
    return absl::UnavailableError(absl::StrCat("tap filter: opening the BPF object: ", Errno(errno)));
  }
  if (const int err = tap__load(skel); err != 0) {
    tap__destroy(skel);
    return absl::UnavailableError(
        absl::StrCat("tap filter: the kernel refused the tc (sched_cls) program: ", Errno(err)));
  }
  return std::unique_ptr<TapFilter>(new TapFilter(skel));
}

TapFilter::~TapFilter() {
  if (attached_) Detach();
  tap__destroy(skel_);
}

absl::Status TapFilter::AttachToInterface(int ifindex) {
  if (attached_) return absl::FailedPreconditionError("tap filter: already attached");
  if (ifindex <= 0)
    return absl::InvalidArgumentError(absl::StrCat("tap filter: bad interface index ", ifindex));
  ScopedFd netns(open(kThreadNetns, O_RDONLY | O_CLOEXEC));
  if (!netns.valid()) return ErrnoStatus(absl::StrCat("tap filter: opening ", kThreadNetns));
  struct bpf_tc_hook hook = IngressHook(ifindex);
  int err = bpf_tc_hook_create(&hook);
  if (err != 0 && err != -EEXIST) {
    if (err == -ENODEV) {
      return absl::NotFoundError(
          absl::StrCat("tap filter: no interface with index ", ifindex, ": ", Errno(err)));
    }
    return absl::UnavailableError(
        absl::StrCat("tap filter: making the clsact qdisc on interface ", ifindex, ": ", Errno(err)));
  }
  const bool made_qdisc = err == 0;
  struct bpf_tc_opts opts = {};
  opts.sz = sizeof(opts);
  opts.prog_fd = bpf_program__fd(skel_->progs.dsec_tap_ingress);
  if (err = bpf_tc_attach(&hook, &opts); err != 0) {
    if (made_qdisc) {
      hook.attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS);
      bpf_tc_hook_destroy(&hook);
    }
    return absl::UnavailableError(
        absl::StrCat("tap filter: attaching to the ingress of interface ", ifindex, ": ", Errno(err)));
  }
  ifindex_ = ifindex;
  made_qdisc_ = made_qdisc;
  handle_ = opts.handle;
  priority_ = opts.priority;
  netns_ = std::move(netns);
  attached_ = true;
  return absl::OkStatus();
}

// Best effort: the tap may already be gone (and the filter with it).
void TapFilter::Detach() {
  // An interface index means another interface in another namespace: enter
  // the tap's if this thread is elsewhere, and come back.
  ScopedFd here(open(kThreadNetns, O_RDONLY | O_CLOEXEC));
  const bool move = here.valid() && !SameNamespace(here.get(), netns_.get());
  if (!here.valid() || (move && setns(netns_.get(), CLONE_NEWNET) != 0)) return;
  struct bpf_tc_hook hook = IngressHook(ifindex_);
  if (made_qdisc_) {
    // clsact's ingress and egress go together: destroying both removes the
    // qdisc and every filter on it.
    hook.attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS);
    bpf_tc_hook_destroy(&hook);
  } else {
    struct bpf_tc_opts opts = {};
    opts.sz = sizeof(opts);
    opts.handle = handle_;
    opts.priority = priority_;
    bpf_tc_detach(&hook, &opts);
  }
  if (move) DSEC_CHECK(setns(here.get(), CLONE_NEWNET) == 0);  // else this thread is stranded
  attached_ = false;
}

absl::Status TapFilter::Allow(const EgressRule& rule) { return RuleLists::Of(skel_, kOwner).Allow(rule); }
absl::Status TapFilter::Deny(const EgressRule& rule) { return RuleLists::Of(skel_, kOwner).Deny(rule); }
absl::Status TapFilter::RemoveAllow(const EgressRule& rule) {
  return RuleLists::Of(skel_, kOwner).RemoveAllow(rule);
}
absl::Status TapFilter::RemoveDeny(const EgressRule& rule) {
  return RuleLists::Of(skel_, kOwner).RemoveDeny(rule);
}

void TapFilter::RequireSource(uint32_t address) {
  // The .bss is mapped into this process: the next packet sees the store.
  __atomic_store_n(&skel_->bss->source4, htonl(address), __ATOMIC_RELAXED);
}

absl::StatusOr<TapCounters> TapFilter::Counters() const {
  DSEC_ASSIGN_OR_RETURN(const std::vector<uint64_t> c, SumPerCpuCounters(skel_->maps.counters, 6, kOwner));
  return TapCounters{.packets_allowed = c[0],
                     .bytes_allowed = c[1],
                     .packets_dropped = c[2],
                     .bytes_dropped = c[3],
                     .attempts_allowed = c[4],
                     .attempts_refused = c[5]};
}

}  // namespace dsec::bpf
