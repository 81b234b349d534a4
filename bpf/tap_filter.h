// SPDX-License-Identifier: Apache-2.0
// A microVM's egress policy on the host side of its tap device: tap.bpf.c's
// tc program on the tap's ingress (the frames the guest sends), with the
// same allow and deny lists and the same rule API as a sandbox's
// EgressPolicy. ARP passes; any other frame passes only when it is IP and
// the rules allow its destination (and, once RequireSource was called, an
// IPv4 packet only from the guest's own address). A refused TCP segment is
// answered with a RST to the guest, so that its connect() fails at once. Attached with libbpf's netlink tc calls
// (a clsact qdisc, made if the tap has none, and one direct-action filter);
// destruction removes the filter, and the qdisc if this object made it.
//
// Called from the thread that owns the microVM's networking; lives as long
// as its tap. The tap is found, and later detached from, in the network
// namespace the attaching thread was in (kept by the object), so the
// destructor may run on any thread.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/scoped_fd.h"
#include "bpf/egress_rule.h"

struct tap;  // the generated skeleton (tap.skel.h)

namespace dsec::bpf {

struct TapCounters {
  uint64_t packets_allowed = 0;  // frames let through (ARP included)
  uint64_t bytes_allowed = 0;    // their lengths, Ethernet header included
  uint64_t packets_dropped = 0;
  uint64_t bytes_dropped = 0;
  // Connection attempts: TCP SYNs without ACK and UDP datagrams (IPv4), the
  // packets a connect() or sendmsg() starts with; refused ones are also in
  // packets_dropped (a refused SYN is answered with a RST).
  uint64_t attempts_allowed = 0;
  uint64_t attempts_refused = 0;
};

class TapFilter {
 public:
  // Loads the program and empty maps (every IP packet dropped until rules
  // are added). Unavailable, with the kernel's reason, where the kernel
  // refuses BPF or sched_cls programs.
  static absl::StatusOr<std::unique_ptr<TapFilter>> Load();
  ~TapFilter();
  TapFilter(const TapFilter&) = delete;
  TapFilter& operator=(const TapFilter&) = delete;

  // Attaches to the ingress of the interface with this index in the calling
  // thread's network namespace (once per filter), making its clsact qdisc
  // if it has none. NotFound for no such interface; Unavailable with the
  // kernel's reason when it refuses.
  absl::Status AttachToInterface(int ifindex);

  // Rules take effect for the next packet.
  absl::Status Allow(const EgressRule& rule);
  absl::Status Deny(const EgressRule& rule);
  absl::Status RemoveAllow(const EgressRule& rule);
  absl::Status RemoveDeny(const EgressRule& rule);

  // From now on IPv4 packets from any source but `address` (host order;
  // the guest's) are dropped, whatever the rules say. 0: any source again.
  void RequireSource(uint32_t address);

  absl::StatusOr<TapCounters> Counters() const;

 private:
  explicit TapFilter(struct tap* skel) : skel_(skel) {}
  void Detach();

  struct tap* skel_;
  int ifindex_ = 0;
  bool attached_ = false;
  bool made_qdisc_ = false;
  uint32_t handle_ = 0;
  uint32_t priority_ = 0;
  ScopedFd netns_;  // where ifindex_ means the tap
};

}  // namespace dsec::bpf
