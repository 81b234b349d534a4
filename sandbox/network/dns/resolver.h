// SPDX-License-Identifier: Apache-2.0
// The node resolver for domain egress rules: a UDP DNS forwarder that
// answers a sandbox only for the names its policy allows and reports the
// addresses it returned, so that the caller can allow exactly those (for
// their TTL) in that sandbox's BPF maps before the sandbox sees the answer.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "base/eventfd.h"
#include "base/scoped_fd.h"
#include "bpf/egress_rule.h"
#include "sandbox/network/dns/domain_rule.h"

namespace dsec::network::dns {

using Ipv4Address = std::array<uint8_t, 4>;  // network order ("10.0.0.2" is {10, 0, 0, 2})

struct Ipv4Endpoint {
  Ipv4Address address{};
  uint16_t port = 0;  // host order

  bool operator==(const Ipv4Endpoint&) const = default;
};

// Parses "127.0.0.1:5353" (the port 0..65535; 0 lets bind choose).
absl::StatusOr<Ipv4Endpoint> ParseIpv4Endpoint(std::string_view text);

// The first IPv4 `nameserver` of a resolv.conf(5) text, on port 53.
// Comments ('#' or ';') are skipped, IPv6 nameservers passed over;
// NotFound if there is no IPv4 one.
absl::StatusOr<Ipv4Endpoint> UpstreamFromResolvConf(std::string_view text);

// A snapshot of a resolver's counters; each counts since Create.
struct ResolverCounters {
  uint64_t queries = 0;            // datagrams received from clients
  uint64_t refused = 0;            // REFUSED: unknown client, name not allowed, class not IN
  uint64_t forwarded = 0;          // queries sent upstream
  uint64_t answered = 0;           // upstream answers relayed to their client
  uint64_t upstream_timeouts = 0;  // SERVFAIL: no upstream answer by the deadline
  uint64_t malformed = 0;          // dropped (unparsable, a response), FORMERR or NOTIMP
  uint64_t upstream_ignored = 0;   // upstream datagrams matching no query (late, spoofed, garbled)
  uint64_t overloaded = 0;         // SERVFAIL: max_in_flight queries already upstream
};

// Threads: Create, counters(), listen_endpoint() and the destructor are
// called by the owner (any one thread at a time; counters() from any
// thread). Everything else — receiving, policy checks, forwarding,
// timeouts, and both callbacks — runs on the resolver's own thread, which
// Create starts and the destructor stops (through an eventfd) and joins.
// The callbacks therefore must not destroy the resolver, should return
// quickly (every sandbox's queries wait on them), and must be safe to call
// while the owner's other threads change what they read (policies).
// A client's domain rules: a name is answered when an allow rule matches
// it and no deny rule does (deny wins, as for addresses).
struct DomainPolicy {
  std::vector<DomainRule> allow;
  std::vector<DomainRule> deny;
};

class Resolver {
 public:
  // The client's policy, or nullopt if the client is not a known sandbox
  // (its queries are REFUSED).
  using PolicyFn = std::function<std::optional<DomainPolicy>(const Ipv4Address& client)>;
  // Called once per (query, matching rule) when an upstream answer gives
  // A/AAAA addresses for an allowed name, before the answer goes to the
  // client: `addresses` are /32s or /128s with the rule's port, `ttl_s`
  // their smallest TTL (and that of the CNAMEs leading to them) clamped to
  // [kMinTtlS, kMaxTtlS] (message.h). The rules are the client's as they
  // were when its query arrived.
  using ResolvedFn = std::function<void(const Ipv4Address& client, const DomainRule& rule,
                                        std::vector<bpf::EgressRule> addresses, uint32_t ttl_s)>;

  struct Options {
    // Where sandboxes send queries (the node's gateway address, port 53).
    // Port 0: bind chooses (tests); listen_endpoint() tells which. Bound
    // with IP_FREEBIND: the address need not exist yet (the gateway
    // address appears on the host with the first sandbox's link).
    Ipv4Endpoint listen;
    // Where allowed queries go; nullopt: UpstreamFromResolvConf of the
    // host's /etc/resolv.conf.
    std::optional<Ipv4Endpoint> upstream;
    // How long a forwarded query waits for its answer before the client
    // gets SERVFAIL.
    std::chrono::milliseconds upstream_deadline{2000};
    // Queries upstream at one time; beyond, clients get SERVFAIL at once.
    // 1..65535 (each needs its own query id).
    size_t max_in_flight = 256;
    PolicyFn policy;         // required
    ResolvedFn on_resolved;  // required
  };

  // Binds the listen and upstream sockets and starts the thread.
  // InvalidArgument for bad options (missing callbacks, no in-flight
  // queries, upstream equal to the listen endpoint), NotFound without an
  // IPv4 upstream, the bind's error otherwise.
  static absl::StatusOr<std::unique_ptr<Resolver>> Create(Options options);

  // Stops and joins the thread; queries upstream at that moment get no
  // answer.
  ~Resolver();

  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // The bound listen address (with the port bind chose for port 0).
  Ipv4Endpoint listen_endpoint() const { return listen_endpoint_; }
  // Thread-safe.
  ResolverCounters counters() const;

 private:
  class Loop;  // resolver.cc: the thread's state
  struct AtomicCounters {
    std::atomic<uint64_t> queries{0}, refused{0}, forwarded{0}, answered{0}, upstream_timeouts{0},
        malformed{0}, upstream_ignored{0}, overloaded{0};
  };

  Resolver(Ipv4Endpoint listen_endpoint, EventFd stop, std::unique_ptr<Loop> loop);

  const Ipv4Endpoint listen_endpoint_;
  EventFd stop_;
  AtomicCounters counters_;     // written by the thread, read by anyone
  std::unique_ptr<Loop> loop_;  // touched by the thread only, once started
  std::thread thread_;
};

}  // namespace dsec::network::dns
