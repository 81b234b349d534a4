// SPDX-License-Identifier: Apache-2.0
// One sandbox's network: an address leased from the node's subnet, a veth
// pair (host end "ds<address>" with the gateway address and a /32 route to
// the sandbox; the sandbox end "eth0" in the sandbox's own network
// namespace with the address and a default route through the gateway), and
// its egress policy (bpf/egress_policy.h) attached to the sandbox's cgroup
// v2 directory. Besides the client's rules the policy always lets the
// sandbox reach its own loopback (127.0.0.0/8, ::1) and the node resolver
// (the gateway, port 53); the client's deny rules still win over those.
//
// Everything goes with the object: the programs detach, the veth is
// deleted (it would also go with the namespace), the lease returns.
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
#include "bpf/egress_policy.h"
#include "sandbox/network/node_network.h"
#include "sandbox/network/policy.h"

namespace dsec::network {

struct NetworkCounters {
  uint64_t bytes_out = 0;  // sent by the sandbox through its veth
  uint64_t bytes_in = 0;
  uint64_t connects_allowed = 0;  // connect()/sendmsg() calls let through
  uint64_t connects_denied = 0;   // refused with EPERM
  uint64_t packets_dropped = 0;   // the cgroup_skb wall (raw sockets, ICMP)
};

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
  SandboxNetwork(NodeNetwork* node, uint32_t address, std::unique_ptr<bpf::EgressPolicy> policy)
      : node_(node), address_(address), host_if_(NodeNetwork::HostInterface(address)),
        policy_(std::move(policy)) {}
  absl::Status Plumb(int netns_fd);
  // Brings the BPF maps to exactly the rules `spec` wants, with the
  // implicit ones: adds what is missing, then removes what is no longer
  // wanted (so that a change never opens a gap in between).
  absl::Status Sync(const NetworkSpec& spec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  NodeNetwork* node_;
  const uint32_t address_;
  const std::string host_if_;
  bool plumbed_ = false;  // the veth exists (set by Create only)
  std::atomic<bool> closed_{false};

  mutable std::mutex mu_;
  std::unique_ptr<bpf::EgressPolicy> policy_ ABSL_GUARDED_BY(mu_);
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
