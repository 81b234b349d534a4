// SPDX-License-Identifier: Apache-2.0
// One sandbox's network: an address leased from the node's subnet and a
// point-to-point link to the host whose host end "ds<address>" carries the
// gateway address and a /32 route to the sandbox, in one of two forms:
// - Create (container tier): a veth pair, the sandbox end "eth0" in the
//   sandbox's own network namespace with the address and a default route
//   through the gateway; the egress policy (bpf/egress_policy.h) attached
//   to the sandbox's cgroup v2 directory. Besides the client's rules the
//   policy always lets the sandbox reach its own loopback (127.0.0.0/8,
//   ::1) and the node resolver (the gateway, port 53).
// - CreateTap (microvm tier): a tap whose descriptor the VM's monitor takes
//   over (the guest configures its eth0 itself), with the tap filter
//   (bpf/tap_filter.h) on its ingress: the same rules but loopback (the
//   guest's never reaches the tap), and only the guest's own source
//   address.
// The client's deny rules win over the implicit ones. The rule
// bookkeeping (the client's rules, addresses the node resolver returned,
// their expiry, run-time changes) is one and the same for both.
//
// Everything goes with the object: the programs detach, the veth or tap is
// deleted (a veth would also go with the namespace, a tap with its last
// descriptor), the lease returns.
//
// Threads: the owning tier's thread for Create/SetSpec/Counters/the
// destructor; the node resolver's thread through NodeNetwork's registry.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/scoped_fd.h"
#include "bpf/egress_policy.h"
#include "bpf/tap_filter.h"
#include "sandbox/network/node_network.h"
#include "sandbox/network/policy.h"

namespace dsec::network {

// For a tap (a microVM, whose calls the host does not see) the connects
// are the packets such calls start with (TCP SYNs, UDP datagrams), and
// packets_dropped every frame the tap filter dropped (the refused attempts
// among them).
struct NetworkCounters {
  uint64_t bytes_out = 0;  // sent by the sandbox through its veth or tap
  uint64_t bytes_in = 0;
  uint64_t connects_allowed = 0;  // connect()/sendmsg() calls let through
  uint64_t connects_denied = 0;   // refused with EPERM (a tap: with a RST, or dropped)
  uint64_t packets_dropped = 0;   // the cgroup_skb wall (raw sockets, ICMP)
};

// Where a sandbox's rules take effect (sandbox_network.cc): the cgroup
// programs of an EgressPolicy or a microVM's TapFilter.
class RuleTarget;
class NlSocket;

class SandboxNetwork {
 public:
  // `netns_fd`: the sandbox's network namespace (no eth0 in it yet);
  // `cgroup_dir`: a cgroup v2 directory holding every process of the
  // sandbox (the caller made it and removes it). All or nothing:
  // Unavailable with the kernel's reason where the policy cannot be
  // enforced (BPF refused), never a sandbox that runs open.
  static absl::StatusOr<std::unique_ptr<SandboxNetwork>> Create(NodeNetwork* node, int netns_fd,
                                                                const std::string& cgroup_dir,
                                                                const NetworkSpec& spec);
  // A microVM's: a tap "ds<address>" in the calling thread's network
  // namespace (tap_fd(), for the monitor), the tap filter on its ingress.
  // Unavailable with the kernel's reason where the filter cannot load or
  // attach, as for Create.
  static absl::StatusOr<std::unique_ptr<SandboxNetwork>> CreateTap(NodeNetwork* node, const NetworkSpec& spec);
  ~SandboxNetwork();  // Close()
  SandboxNetwork(const SandboxNetwork&) = delete;
  SandboxNetwork& operator=(const SandboxNetwork&) = delete;

  // Releases everything (programs, veth, lease) now; idempotent. The
  // object may outlive it (a reader's shared reference): afterwards
  // SetSpec and Counters answer FailedPrecondition.
  void Close();

  // Replaces the policy: effective for the next connect at once.
  // InvalidArgument leaves the old one whole.
  absl::Status SetSpec(const NetworkSpec& spec);
  NetworkSpec spec() const;
  absl::StatusOr<NetworkCounters> Counters() const;

  uint32_t address() const { return address_; }
  std::string address_text() const { return Ipv4Text(address_); }
  std::string gateway_text() const { return Ipv4Text(node_->gateway()); }
  const std::string& host_interface() const { return host_if_; }
  // "address/prefix", as the sandbox's eth0 has it.
  std::string address_cidr() const;
  // A tap's descriptor (-1 for a veth, and after Close): the monitor
  // inherits a copy; this one keeps the tap until Close.
  int tap_fd() const { return tap_.get(); }
  // The MAC address the guest's NIC gets on a tap: locally administered
  // unicast, 02:00 and the IPv4 address.
  std::string GuestMac() const;
  // The sandbox's /etc/resolv.conf: the node resolver.
  std::string ResolvConf() const;

  // For the node resolver (its thread): the domain rules, and addresses it
  // resolved for one of them (`rule`), allowed until `expires_ns` (CLOCK_MONOTONIC;
  // a later answer extends it). Expire() drops those past their time.
  std::vector<dns::DomainRule> AllowedDomains() const;
  std::vector<dns::DomainRule> DeniedDomains() const;
  absl::Status AllowResolved(const dns::DomainRule& rule, const std::vector<bpf::EgressRule>& addresses,
                             int64_t expires_ns);
  void Expire(int64_t now_ns);
  // Addresses allowed by resolution now.
  size_t resolved_count() const;

 private:
  SandboxNetwork(NodeNetwork* node, uint32_t address, std::unique_ptr<RuleTarget> rules);
  absl::Status Plumb(int netns_fd);
  // The tap, the filter attached to it (`filter`: the one inside rules_),
  // then the host end's address, forwarding and route.
  absl::Status PlumbTap(bpf::TapFilter* filter);
  // The address and route on the host end, forwarding on, up.
  absl::Status ConfigureHostEnd(NlSocket& host);
  // Brings the BPF maps to exactly the rules `spec` wants, with the
  // implicit ones: adds what is missing, then removes what is no longer
  // wanted (so that a change never opens a gap in between).
  absl::Status Sync(const NetworkSpec& spec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  NodeNetwork* node_;
  const uint32_t address_;
  const std::string host_if_;
  bool plumbed_ = false;  // the veth or tap exists (set by Create* only)
  ScopedFd tap_;          // a tap's (set by CreateTap only, closed by Close)
  std::atomic<bool> closed_{false};

  mutable std::mutex mu_;
  std::unique_ptr<RuleTarget> policy_ ABSL_GUARDED_BY(mu_);
  NetworkSpec spec_ ABSL_GUARDED_BY(mu_);
  // What the maps hold, by the rule's text (FormatEgressRule).
  std::map<std::string, bpf::EgressRule> allowed_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, bpf::EgressRule> denied_ ABSL_GUARDED_BY(mu_);
  struct Resolved {
    bpf::EgressRule rule;
    dns::DomainRule from;  // goes with it when a PATCH drops that rule
    int64_t expires_ns;
  };
  // By address and domain rule.
  std::map<std::string, Resolved> resolved_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dsec::network
