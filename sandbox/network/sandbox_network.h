// SPDX-License-Identifier: Apache-2.0
// One sandbox's network: its rules (the client's egress policy, and the
// addresses the node resolver returned for its domain rules) and a BPF
// program set that enforces them, and for each place the sandbox's
// traffic leaves from an address leased from the node's subnet and a
// point-to-point link to the host whose host end "ds<address>" carries the
// gateway address and a /32 route to that address. Two forms:
// - Create / CreateShared + Join (container and fncall tiers): the egress
//   policy's cgroup programs (bpf/egress_policy.h) on each network
//   namespace's cgroup v2 directory, and a veth pair whose end "eth0" is in
//   that namespace with the address and a default route through the
//   gateway. One namespace for a container; one per worker for the fncall
//   tier, which come and go (Join). Besides the client's rules the policy
//   lets the sandbox reach its own loopback (127.0.0.0/8, ::1).
// - CreateTap (microvm tier): a tap whose descriptor the VM's monitor takes
//   over (the guest configures its eth0 itself), with the tap filter
//   (bpf/tap_filter.h) on its ingress: the same rules but loopback (the
//   guest's never reaches the tap), and only the guest's own source
//   address.
// Both always allow the node resolver (the gateway, port 53); the client's
// deny rules win over the implicit ones.
//
// One rule set, however many namespaces: a change (SetSpec) and the
// addresses the resolver allows reach them all at once, and the counters
// cover them all (bytes of namespaces that left included).
//
// Everything goes with the object: the programs detach, the veths and the
// tap are deleted (a veth would also go with its namespace, a tap with its
// last descriptor), the leases return.
//
// Threads: the owning tier's threads for Create/Join/SetSpec/Counters/the
// destructor (Join and a member's destruction may come from a thread of
// the tier's while another calls SetSpec); the node resolver's thread
// through NodeNetwork's registry.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

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

class SandboxNetwork;

// One network namespace's share of a sandbox's network (SandboxNetwork::Join):
// its address, its veth and the policy's programs on its cgroup. They go
// with this object, or earlier with the network's Close. Must not outlive
// its SandboxNetwork. Threads: any (the network locks).
class NetworkMember {
 public:
  NetworkMember(SandboxNetwork* network, uint32_t address) : network_(network), address_(address) {}
  ~NetworkMember();
  NetworkMember(const NetworkMember&) = delete;
  NetworkMember& operator=(const NetworkMember&) = delete;
  uint32_t address() const { return address_; }

 private:
  SandboxNetwork* network_;
  const uint32_t address_;
};

// Where a sandbox's rules take effect (sandbox_network.cc): the cgroup
// programs of an EgressPolicy or a microVM's TapFilter.
class RuleTarget;

class SandboxNetwork {
 public:
  // A sandbox in one network namespace (a container). `netns_fd`: the
  // namespace (no eth0 in it yet); `cgroup_dir`: a cgroup v2 directory
  // holding every process of the sandbox (the caller made it and removes
  // it). All or nothing: Unavailable with the kernel's reason where the
  // policy cannot be enforced (BPF refused), never a sandbox that runs
  // open.
  static absl::StatusOr<std::unique_ptr<SandboxNetwork>> Create(NodeNetwork* node, int netns_fd,
                                                                const std::string& cgroup_dir,
                                                                const NetworkSpec& spec);
  // A sandbox whose processes live in several network namespaces, each
  // with its cgroup v2 directory, that come and go (the fncall tier's
  // workers): the policy now, each namespace by Join. Errors as Create's.
  static absl::StatusOr<std::unique_ptr<SandboxNetwork>> CreateShared(NodeNetwork* node,
                                                                      const NetworkSpec& spec);
  // Gives one more namespace of the sandbox an address and a veth, and
  // puts the policy (as it is now, and as it changes) on `cgroup_dir`;
  // all or nothing. FailedPrecondition after Close, and for a tap's.
  absl::StatusOr<std::unique_ptr<NetworkMember>> Join(int netns_fd, const std::string& cgroup_dir);
  // A container's network made before its processes (the container tier
  // without a user namespace): a namespace already wired (made ahead by
  // the node when one is ready: NodeNetworkOptions::netns_ahead) for the
  // sandbox's init to join, netns_fd(); the policy goes on the sandbox's
  // cgroup v2 directory with AttachTo once the init is in it, before
  // anything else of the sandbox runs. Errors as Create's.
  static absl::StatusOr<std::unique_ptr<SandboxNetwork>> CreateAhead(NodeNetwork* node, const NetworkSpec& spec);
  // CreateAhead's namespace until AttachTo; -1 otherwise.
  int netns_fd() const { return ahead_netns_.get(); }
  // CreateAhead's second step; FailedPrecondition for any other network,
  // or a second time.
  absl::Status AttachTo(const std::string& cgroup_dir);
  // A microVM's: a tap "ds<address>" in the calling thread's network
  // namespace (tap_fd(), for the monitor), the tap filter on its ingress.
  // Unavailable with the kernel's reason where the filter cannot load or
  // attach, as for Create.
  static absl::StatusOr<std::unique_ptr<SandboxNetwork>> CreateTap(NodeNetwork* node, const NetworkSpec& spec);
  ~SandboxNetwork();  // Close()
  SandboxNetwork(const SandboxNetwork&) = delete;
  SandboxNetwork& operator=(const SandboxNetwork&) = delete;

  // Releases everything (programs, veths, leases) now; idempotent. The
  // object may outlive it (a reader's shared reference): afterwards
  // SetSpec and Counters answer FailedPrecondition, Join too.
  void Close();

  // Replaces the policy: effective for the next connect at once.
  // InvalidArgument leaves the old one whole.
  absl::Status SetSpec(const NetworkSpec& spec);
  NetworkSpec spec() const;
  absl::StatusOr<NetworkCounters> Counters() const;

  // The addresses of its namespaces now, lowest first (one for a
  // container; none for a fncall sandbox between its workers).
  std::vector<uint32_t> addresses() const;
  // The first of them (a container's only one), 0 / "" without any.
  uint32_t address() const;
  std::string address_text() const;
  std::string gateway_text() const { return Ipv4Text(node_->gateway()); }
  // The host end of the first namespace's veth or the tap, "" without any.
  std::string host_interface() const;
  // "address/prefix" of the first address, as the sandbox's eth0 has it.
  std::string address_cidr() const;
  // A tap's descriptor (-1 for veths, and after Close): the monitor
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
  friend class NetworkMember;
  SandboxNetwork(NodeNetwork* node, std::unique_ptr<RuleTarget> rules);
  // Rules of a fresh network to `spec`; the resolver check first.
  static absl::Status CheckResolver(NodeNetwork* node, const NetworkSpec& spec);
  // A namespace's veth and routes (`address` leased, its link recorded).
  absl::Status Plumb(uint32_t address, int netns_fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(links_mu_);
  // The tap for `address`, the filter attached to it (`filter`: the one
  // inside policy_), then the host end.
  absl::Status PlumbTap(uint32_t address, bpf::TapFilter* filter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(links_mu_);
  // Undoes Join for `address` (NetworkMember's destruction); nothing
  // if it went already (Close).
  void Leave(uint32_t address);
  void LeaveLocked(uint32_t address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(links_mu_);
  // Brings the BPF maps to exactly the rules `spec` wants, with the
  // implicit ones: adds what is missing, then removes what is no longer
  // wanted (so that a change never opens a gap in between).
  absl::Status Sync(const NetworkSpec& spec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  NodeNetwork* node_;
  std::atomic<bool> closed_{false};

  // One namespace's plumbing, by its address.
  struct Link {
    std::string host_if;
    bool plumbed = false;  // the veth or tap exists
    std::unique_ptr<bpf::CgroupLinks> programs;  // the policy on its cgroup
  };
  // Serialises Join, Leave and Close. Lock order: links_mu_, then the
  // node's registry lock, then mu_ (the resolver holds the registry's
  // lock while it calls into this object).
  mutable std::mutex links_mu_;
  std::map<uint32_t, Link> links_ ABSL_GUARDED_BY(links_mu_);
  // Bytes through veths that are gone (the counters never go back).
  uint64_t gone_bytes_out_ ABSL_GUARDED_BY(links_mu_) = 0;
  uint64_t gone_bytes_in_ ABSL_GUARDED_BY(links_mu_) = 0;
  // Create's one namespace.
  std::unique_ptr<NetworkMember> own_member_;
  // CreateTap's tap (its one link), closed by Close.
  ScopedFd tap_;
  // CreateAhead's namespace, until AttachTo.
  ScopedFd ahead_netns_;

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
