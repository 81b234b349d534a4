// SPDX-License-Identifier: Apache-2.0
// What sandbox networking needs once per node daemon: the sandboxes'
// subnet and its address leases, the gateway address every sandbox routes
// through, NAT from the subnet to the host's uplinks (an nftables table of
// the daemon's own, which also drops sandbox-to-sandbox traffic), IPv4
// forwarding on the uplinks, and the node resolver (dns/) that answers
// sandboxes' queries for the names their policies allow.
//
// Routed, not bridged: each sandbox is one veth pair (sandbox_network.h)
// whose host end carries the gateway address as a /32 and a /32 route to
// the sandbox, so sandboxes share no layer-2 segment and everything they
// send passes the host's routing and the nftables forward chain.
//
// Threads: any thread (leases and the sandbox registry are locked); the
// resolver's thread calls the registered sandboxes.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <condition_variable>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/scoped_fd.h"
#include "bpf/egress_policy.h"
#include "nlohmann/json.hpp"
#include "sandbox/network/dns/resolver.h"
#include "sandbox/network/nft.h"

namespace dsec::network {

class SandboxNetwork;

struct NodeNetworkOptions {
  // The sandboxes' IPv4 subnet, prefix /8../28; its first address is the
  // gateway. Daemons on one host need subnets of their own.
  std::string subnet = "10.201.0.0/16";
  // Interfaces sandbox traffic leaves the node by (IPv4 forwarding is
  // enabled on them while the daemon runs). Empty: none, sandboxes reach
  // only the node itself.
  std::vector<std::string> uplinks;
  // The resolver's upstream server, "a.b.c.d" or "a.b.c.d:port"; "": the
  // first nameserver of /etc/resolv.conf.
  std::string dns_upstream;
  // Egress policies (bpf/egress_policy.h) loaded ahead on a thread of the
  // node network's, so that a create does not wait for the kernel's
  // verifier (about 0.5 ms here); 0: each create loads its own.
  size_t policies_ahead = 8;
  // Network namespaces wired ahead on the same thread (TakeWired): made,
  // a veth to the host with a leased address and routes, so that a
  // container create only attaches its policy and its init joins the
  // namespace, without waiting for the RTNL lock (which a veth's deletion
  // holds for 15-30 ms here). Each holds a lease. 0: each create wires its
  // own (the daemon sets it: --net-netns-ahead).
  size_t netns_ahead = 0;
};

// A network namespace wired to the node (NodeNetwork::TakeWired): its end
// "eth0" has `address` and a default route through the gateway, its host
// end is NodeNetwork::HostInterface(address). The holder owns the lease
// and the veth.
struct WiredNetns {
  ScopedFd netns;
  uint32_t address = 0;
};

// Restart cleanup: where the owner of `subnet`'s node network died without
// cleaning up (kill -9), switches its uplinks' forwarding off again and
// deletes its nftables table. Nothing when a live process owns it. Returns
// whether anything was left. (Its sandboxes' veths went with their
// namespaces, their programs with its descriptors, its leases with its
// memory.)
absl::StatusOr<bool> CleanupStaleNodeNetwork(const std::string& subnet);

// The interface of the host's default route (/proc/net/route), or "".
std::string DefaultRouteInterface();

class NodeNetwork {
 public:
  // Unavailable (with the reason) where the host cannot offer it:
  // nftables refused, a forwarding switch not writable.
  static absl::StatusOr<std::unique_ptr<NodeNetwork>> Create(const NodeNetworkOptions& options);
  ~NodeNetwork();
  NodeNetwork(const NodeNetwork&) = delete;
  NodeNetwork& operator=(const NodeNetwork&) = delete;

  // A free host address of the subnet (host order); ResourceExhausted when
  // every one is leased.
  absl::StatusOr<uint32_t> Lease();
  void Release(uint32_t address);
  size_t leased() const;

  uint32_t gateway() const { return gateway_; }
  int prefix_len() const { return prefix_len_; }
  const std::string& subnet() const { return subnet_text_; }
  // The host end of a sandbox's veth: "ds" and the address in hex, unique
  // per address (a daemon's leftovers are recognised and replaced).
  static std::string HostInterface(uint32_t address);

  // The resolver finds a sandbox by its address. Register before the
  // sandbox can send (its veth is up), unregister before it goes.
  void Register(uint32_t address, SandboxNetwork* sandbox);
  void Unregister(uint32_t address);

  // An egress policy with empty maps: a made-ahead one, or (none ready)
  // loaded now. Unavailable with the kernel's reason.
  absl::StatusOr<std::unique_ptr<bpf::EgressPolicy>> TakePolicy();
  // Creates served by a made-ahead policy, and those that loaded their own.
  uint64_t policies_taken_ahead() const;
  uint64_t policies_loaded_inline() const;
  // Waits until `n` made-ahead policies are ready (tests, benchmarks);
  // false at the deadline (CLOCK_MONOTONIC ns).
  bool WaitPoliciesReady(size_t n, int64_t deadline_ns);

  // The veth of a sandbox's namespace `netns_fd` (no "eth0" in it yet) for
  // the leased `address`: host end HostInterface(address) configured as by
  // ConfigureHostEnd, the namespace's end "eth0" with the address, up, a
  // default route through the gateway. A predecessor's host end of that
  // name is replaced. On error nothing of it is left.
  absl::Status WireVeth(uint32_t address, int netns_fd);
  // A host end (veth or tap) of `address`: the gateway /32, forwarding,
  // up, a /32 route to the address.
  absl::Status ConfigureHostEnd(const std::string& host_if, uint32_t address);
  // A namespace wired ahead, or (none ready) one made and wired now; all
  // or nothing. The caller holds the lease (Release) and deletes the host
  // end when done (the veth would also go with the namespace).
  absl::StatusOr<WiredNetns> TakeWired();
  uint64_t wired_taken_ahead() const;
  uint64_t wired_made_inline() const;
  // Waits until `n` wired namespaces are ready (tests, benchmarks); false
  // at the deadline (CLOCK_MONOTONIC ns).
  bool WaitWiredReady(size_t n, int64_t deadline_ns);
  // Sandboxes registered (leases held by wired namespaces not yet taken
  // are not sandboxes).
  size_t sandboxes() const;

  // OK when the node resolver runs (domain rules can be enforced), else
  // why not.
  const absl::Status& resolver_status() const { return resolver_status_; }
  // Its counters (zero without one).
  dns::ResolverCounters resolver_counters() const;

 private:
  NodeNetwork() = default;
  // The resolver's callbacks (its thread).
  std::optional<dns::DomainPolicy> PolicyOf(const dns::Ipv4Address& client);
  void Resolved(const dns::Ipv4Address& client, const dns::DomainRule& rule,
                std::vector<bpf::EgressRule> addresses, uint32_t ttl_s);
  // Drops resolved addresses past their TTL, once a second.
  void ExpiryLoop();
  // Keeps policies_ahead_ policies loaded and netns_ahead_ namespaces
  // wired.
  void AheadLoop();
  // A namespace made and wired now.
  absl::StatusOr<WiredNetns> MakeWired();
  void DropWired(WiredNetns& w);

  ScopedFd lock_;  // the subnet's lock file, flock()ed while we live
  std::string state_path_;  // what a successor needs to undo us (see .cc)
  std::string subnet_text_;
  uint32_t network_ = 0;  // host order
  int prefix_len_ = 0;
  uint32_t gateway_ = 0;
  std::optional<NftTable> table_;
  // Uplinks whose forwarding switch this object turned on (turned off
  // again on destruction).
  std::vector<std::string> forwarding_enabled_;

  mutable std::mutex mu_;
  std::set<uint32_t> leases_ ABSL_GUARDED_BY(mu_);
  uint32_t next_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint32_t, SandboxNetwork*> sandboxes_ ABSL_GUARDED_BY(mu_);

  absl::Status resolver_status_;
  std::unique_ptr<dns::Resolver> resolver_;  // stopped first on destruction
  std::mutex expiry_mu_;
  std::condition_variable expiry_cv_;
  bool stopping_ ABSL_GUARDED_BY(expiry_mu_) = false;
  std::thread expiry_;

  size_t policies_ahead_ = 0;
  size_t netns_ahead_ = 0;
  mutable std::mutex policy_mu_;  // the made-ahead policies and namespaces
  std::condition_variable policy_cv_;
  std::deque<std::unique_ptr<bpf::EgressPolicy>> ready_ ABSL_GUARDED_BY(policy_mu_);
  std::deque<WiredNetns> wired_ ABSL_GUARDED_BY(policy_mu_);
  bool policy_stop_ ABSL_GUARDED_BY(policy_mu_) = false;
  bool policies_failed_ ABSL_GUARDED_BY(policy_mu_) = false;
  uint64_t taken_ahead_ ABSL_GUARDED_BY(policy_mu_) = 0;
  uint64_t loaded_inline_ ABSL_GUARDED_BY(policy_mu_) = 0;
  uint64_t wired_taken_ahead_ ABSL_GUARDED_BY(policy_mu_) = 0;
  uint64_t wired_inline_ ABSL_GUARDED_BY(policy_mu_) = 0;
  std::thread policy_thread_;
};

// The node network of a daemon, made when the first sandbox asks for one
// (a node whose sandboxes never use the network changes nothing on the
// host), kept until the provider goes.
// Threads: any.
class NodeNetworkProvider {
 public:
  explicit NodeNetworkProvider(NodeNetworkOptions options) : options_(std::move(options)) {}
  // The node network, made now if need be; a failure is answered again to
  // the next caller, which tries again.
  absl::StatusOr<NodeNetwork*> Get();
  // {"available", "subnet", "uplinks", "sandboxes"} or the reason it failed.
  nlohmann::json Health() const;

 private:
  const NodeNetworkOptions options_;
  mutable std::mutex mu_;
  std::unique_ptr<NodeNetwork> node_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);
};

// Dotted-quad text of a host-order IPv4 address.
std::string Ipv4Text(uint32_t address);
// Parses "a.b.c.d/len" into a host-order network address and prefix length
// (host bits must be zero). InvalidArgument naming the text.
absl::StatusOr<std::pair<uint32_t, int>> ParseIpv4Subnet(const std::string& text);

}  // namespace dsec::network
