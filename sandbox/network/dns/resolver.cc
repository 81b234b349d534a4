// SPDX-License-Identifier: Apache-2.0
#include "sandbox/network/dns/resolver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <span>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/clock.h"
#include "base/file_io.h"
#include "base/logging.h"
#include "base/status.h"
#include "sandbox/network/dns/message.h"

namespace dsec::network::dns {
namespace {

// Largest UDP payload; a client or upstream datagram never exceeds it.
constexpr size_t kMaxDatagram = 65535;
// Datagrams read from one socket per wake-up, so that a flood on one socket
// does not starve the other or the timeouts.
constexpr int kBatch = 64;

enum Tag : uint32_t { kStopTag = 0, kClientTag = 1, kUpstreamTag = 2 };

sockaddr_in ToSockaddr(const Ipv4Endpoint& ep) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  std::memcpy(&sa.sin_addr.s_addr, ep.address.data(), 4);
  sa.sin_port = htons(ep.port);
  return sa;
}

Ipv4Endpoint FromSockaddr(const sockaddr_in& sa) {
  Ipv4Endpoint ep;
  std::memcpy(ep.address.data(), &sa.sin_addr.s_addr, 4);
  ep.port = ntohs(sa.sin_port);
  return ep;
}

std::string Format(const Ipv4Endpoint& ep) {
  return absl::StrCat(ep.address[0], ".", ep.address[1], ".", ep.address[2], ".", ep.address[3],
                      ":", ep.port);
}

absl::StatusOr<ScopedFd> BoundUdpSocket(const Ipv4Endpoint& ep, bool freebind = false) {
  ScopedFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoToStatus("dns resolver: socket");
  const int one = 1;
  if (freebind && setsockopt(fd.get(), IPPROTO_IP, IP_FREEBIND, &one, sizeof(one)) != 0) {
    return ErrnoToStatus("dns resolver: setsockopt(IP_FREEBIND)");
  }
  const sockaddr_in sa = ToSockaddr(ep);
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) != 0) {
    return ErrnoToStatus(absl::StrCat("dns resolver: bind ", Format(ep)));
  }
  return fd;
}

}  // namespace

absl::StatusOr<Ipv4Endpoint> ParseIpv4Endpoint(std::string_view text) {
  const size_t colon = text.rfind(':');
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", absl::string_view(text.data(), text.size()), "\" is not IPV4:PORT"));
  };
  if (colon == std::string_view::npos) return bad();
  const std::string addr(text.substr(0, colon));
  const std::string_view port = text.substr(colon + 1);
  Ipv4Endpoint ep;
  uint32_t value = 0;
  if (inet_pton(AF_INET, addr.c_str(), ep.address.data()) != 1 || port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      !absl::SimpleAtoi(absl::string_view(port.data(), port.size()), &value) || value > 65535) {
    return bad();
  }
  ep.port = static_cast<uint16_t>(value);
  return ep;
}

absl::StatusOr<Ipv4Endpoint> UpstreamFromResolvConf(std::string_view text) {
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (words.size() < 2 || words[0] != "nameserver") continue;
    Ipv4Endpoint ep;
    ep.port = 53;
    if (inet_pton(AF_INET, std::string(words[1]).c_str(), ep.address.data()) == 1) return ep;
  }
  return absl::NotFoundError("dns resolver: no IPv4 nameserver in resolv.conf");
}

// The resolver thread's state. Created by Create on the owner's thread,
// then touched only by the resolver thread until the destructor has joined
// it.
class Resolver::Loop {
 public:
  Loop(ScopedFd epoll, ScopedFd client, ScopedFd upstream, Ipv4Endpoint upstream_ep, int stop_fd,
       Options options)
      : epoll_(std::move(epoll)),
        client_(std::move(client)),
        upstream_(std::move(upstream)),
        upstream_addr_(ToSockaddr(upstream_ep)),
        stop_fd_(stop_fd),
        options_(std::move(options)),
        buffer_(kMaxDatagram) {}

  // Serves until the stop eventfd becomes readable.
  void Run(AtomicCounters* counters);

 private:
  struct Pending {
    int64_t deadline_ns = 0;
    sockaddr_in client{};
    PktPtr query;                   // the client's, for its id, flags and question
    std::vector<DomainRule> rules;  // the client's rules that allow the name
  };

  void ReadClients();
  void ReadUpstream();
  void HandleQuery(std::span<const uint8_t> wire, const sockaddr_in& from);
  void HandleAnswer(std::span<const uint8_t> wire, const sockaddr_in& from);
  void ExpireDue(int64_t now_ns);
  int TimeoutMs(int64_t now_ns) const;
  uint16_t NewId();
  void Send(int fd, const std::vector<uint8_t>& wire, const sockaddr_in& to);
  void Reply(const ldns_pkt* query, ldns_pkt_rcode rcode, const sockaddr_in& to);
  static void Count(std::atomic<uint64_t>& c) { c.fetch_add(1, std::memory_order_relaxed); }

  ScopedFd epoll_;
  ScopedFd client_;
  ScopedFd upstream_;
  const sockaddr_in upstream_addr_;
  const int stop_fd_;  // owned by the Resolver
  const Options options_;
  AtomicCounters* counters_ = nullptr;
  std::vector<uint8_t> buffer_;
  absl::BitGen random_;  // query ids: unpredictable, so that an off-path spoofer must guess
  absl::flat_hash_map<uint16_t, Pending> in_flight_;  // by upstream query id
  std::set<std::pair<int64_t, uint16_t>> deadlines_;  // (deadline_ns, id) of in_flight_
};

void Resolver::Loop::Run(AtomicCounters* counters) {
  counters_ = counters;
  epoll_event events[8];
  while (true) {
    const int n = epoll_wait(epoll_.get(), events, 8, TimeoutMs(MonotonicNowNs()));
    if (n < 0) {
      if (errno == EINTR) continue;
      DSEC_LOG(err, "dns resolver: epoll_wait failed: {}; resolver stops", std::strerror(errno));
      return;
    }
    for (int i = 0; i < n; ++i) {
      switch (events[i].data.u32) {
        case kStopTag:
          return;
        case kClientTag:
          ReadClients();
          break;
        case kUpstreamTag:
          ReadUpstream();
          break;
      }
    }
    ExpireDue(MonotonicNowNs());
  }
}

void Resolver::Loop::ReadClients() {
  for (int i = 0; i < kBatch; ++i) {
    sockaddr_in from{};
    socklen_t from_len = sizeof(from);
    const ssize_t n = recvfrom(client_.get(), buffer_.data(), buffer_.size(), 0,
                               reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < 0) return;  // EAGAIN: drained; other errors (ICMP reports) concern no one query
    if (from_len != sizeof(from) || from.sin_family != AF_INET) continue;
    HandleQuery(std::span<const uint8_t>(buffer_.data(), static_cast<size_t>(n)), from);
  }
}

void Resolver::Loop::ReadUpstream() {
  for (int i = 0; i < kBatch; ++i) {
    sockaddr_in from{};
    socklen_t from_len = sizeof(from);
    const ssize_t n = recvfrom(upstream_.get(), buffer_.data(), buffer_.size(), 0,
                               reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < 0) return;
    HandleAnswer(std::span<const uint8_t>(buffer_.data(), static_cast<size_t>(n)), from);
  }
}

void Resolver::Loop::HandleQuery(std::span<const uint8_t> wire, const sockaddr_in& from) {
  Count(counters_->queries);
  // Sandbox-controlled: everything in `wire`. ldns parses it; what it
  // cannot parse is dropped, and responses are never answered (no loops
  // between resolvers, no reflection).
  PktPtr query = ParsePacket(wire);
  if (!query || ldns_pkt_qr(query.get())) {
    Count(counters_->malformed);
    return;
  }
  const Ipv4Endpoint client = FromSockaddr(from);
  std::optional<DomainPolicy> rules = options_.policy(client.address);
  if (!rules) {
    Count(counters_->refused);
    Reply(query.get(), LDNS_RCODE_REFUSED, from);
    return;
  }
  if (ldns_pkt_get_opcode(query.get()) != LDNS_PACKET_QUERY) {
    Count(counters_->malformed);
    Reply(query.get(), LDNS_RCODE_NOTIMPL, from);
    return;
  }
  const ldns_rr* question = OnlyQuestion(query.get());
  if (question == nullptr) {
    Count(counters_->malformed);
    Reply(query.get(), LDNS_RCODE_FORMERR, from);
    return;
  }
  std::vector<DomainRule> matching;
  if (ldns_rr_get_class(question) == LDNS_RR_CLASS_IN) {
    const std::string name = NameText(ldns_rr_owner(question));
    const bool denied = std::any_of(rules->deny.begin(), rules->deny.end(),
                                    [&](const DomainRule& d) { return Matches(d, name); });
    for (DomainRule& rule : rules->allow) {
      if (!denied && Matches(rule, name) &&
          std::find(matching.begin(), matching.end(), rule) == matching.end()) {
        matching.push_back(std::move(rule));
      }
    }
  }
  if (matching.empty()) {
    Count(counters_->refused);
    Reply(query.get(), LDNS_RCODE_REFUSED, from);
    return;
  }
  if (in_flight_.size() >= options_.max_in_flight) {
    Count(counters_->overloaded);
    Reply(query.get(), LDNS_RCODE_SERVFAIL, from);
    return;
  }
  const uint16_t id = NewId();
  PktPtr upstream_query = MakeUpstreamQuery(query.get(), question, id);
  const std::vector<uint8_t> out =
      upstream_query ? EncodePacket(upstream_query.get()) : std::vector<uint8_t>{};
  if (out.empty() || sendto(upstream_.get(), out.data(), out.size(), 0,
                            reinterpret_cast<const sockaddr*>(&upstream_addr_),
                            sizeof(upstream_addr_)) != static_cast<ssize_t>(out.size())) {
    DSEC_LOG_RATELIMITED(warn, 1, "dns resolver: forwarding a query upstream failed: {}",
                         out.empty() ? "ldns cannot encode it" : std::strerror(errno));
    Reply(query.get(), LDNS_RCODE_SERVFAIL, from);
    return;
  }
  Count(counters_->forwarded);
  const int64_t deadline_ns =
      MonotonicNowNs() +
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.upstream_deadline).count();
  deadlines_.emplace(deadline_ns, id);
  in_flight_.emplace(id, Pending{deadline_ns, from, std::move(query), std::move(matching)});
}

void Resolver::Loop::HandleAnswer(std::span<const uint8_t> wire, const sockaddr_in& from) {
  // Anyone may send to the upstream socket: an answer counts only if it
  // comes from the upstream's address and port, parses, is a response, and
  // carries the id and question of a query in flight.
  if (from.sin_addr.s_addr != upstream_addr_.sin_addr.s_addr ||
      from.sin_port != upstream_addr_.sin_port) {
    Count(counters_->upstream_ignored);
    return;
  }
  PktPtr answer = ParsePacket(wire);
  if (!answer || !ldns_pkt_qr(answer.get())) {
    Count(counters_->upstream_ignored);
    return;
  }
  auto it = in_flight_.find(ldns_pkt_id(answer.get()));
  const ldns_rr* question = OnlyQuestion(answer.get());
  if (it == in_flight_.end() || question == nullptr ||
      !SameQuestion(question, OnlyQuestion(it->second.query.get()))) {
    Count(counters_->upstream_ignored);
    return;
  }
  Pending pending = std::move(it->second);
  deadlines_.erase({pending.deadline_ns, it->first});
  in_flight_.erase(it);

  const ldns_rr* asked = OnlyQuestion(pending.query.get());
  if (ldns_pkt_get_rcode(answer.get()) == LDNS_RCODE_NOERROR) {
    AnswerAddresses found =
        AddressesOf(answer.get(), ldns_rr_owner(asked), ldns_rr_get_type(asked));
    if (!found.addresses.empty()) {
      const uint32_t ttl_s = ClampTtl(found.ttl_s);
      const Ipv4Endpoint client = FromSockaddr(pending.client);
      for (const DomainRule& rule : pending.rules) {
        std::vector<bpf::EgressRule> addresses = found.addresses;
        for (bpf::EgressRule& a : addresses) a.port = rule.port;
        options_.on_resolved(client.address, rule, std::move(addresses), ttl_s);
      }
      CapAnswerTtls(answer.get(), ttl_s);
    }
  }
  ldns_pkt_set_id(answer.get(), ldns_pkt_id(pending.query.get()));
  const std::vector<uint8_t> out = EncodePacket(answer.get());
  if (out.empty()) {
    Reply(pending.query.get(), LDNS_RCODE_SERVFAIL, pending.client);
    return;
  }
  Count(counters_->answered);
  Send(client_.get(), out, pending.client);
}

void Resolver::Loop::ExpireDue(int64_t now_ns) {
  while (!deadlines_.empty() && deadlines_.begin()->first <= now_ns) {
    const uint16_t id = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto it = in_flight_.find(id);
    if (it == in_flight_.end()) continue;  // cannot happen: both change together
    Pending pending = std::move(it->second);
    in_flight_.erase(it);
    Count(counters_->upstream_timeouts);
    Reply(pending.query.get(), LDNS_RCODE_SERVFAIL, pending.client);
  }
}

int Resolver::Loop::TimeoutMs(int64_t now_ns) const {
  if (deadlines_.empty()) return -1;
  const int64_t left_ns = deadlines_.begin()->first - now_ns;
  if (left_ns <= 0) return 0;
  return static_cast<int>(std::min<int64_t>((left_ns + 999'999) / 1'000'000, 60'000));
}

uint16_t Resolver::Loop::NewId() {
  // Terminates: fewer than 65536 queries are in flight (Create checks).
  while (true) {
    const uint16_t id = absl::Uniform<uint16_t>(random_);
    if (!in_flight_.contains(id)) return id;
  }
}

void Resolver::Loop::Send(int fd, const std::vector<uint8_t>& wire, const sockaddr_in& to) {
  // UDP: a full socket buffer loses this datagram as the network might;
  // the client asks again.
  if (sendto(fd, wire.data(), wire.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) <
      0) {
    DSEC_LOG_RATELIMITED(warn, 1, "dns resolver: sending to {} failed: {}",
                         Format(FromSockaddr(to)), std::strerror(errno));
  }
}

void Resolver::Loop::Reply(const ldns_pkt* query, ldns_pkt_rcode rcode, const sockaddr_in& to) {
  PktPtr reply = MakeReply(query, rcode);
  if (!reply) return;
  const std::vector<uint8_t> wire = EncodePacket(reply.get());
  if (!wire.empty()) Send(client_.get(), wire, to);
}

absl::StatusOr<std::unique_ptr<Resolver>> Resolver::Create(Options options) {
  if (!options.policy || !options.on_resolved) {
    return absl::InvalidArgumentError("dns resolver: policy and on_resolved are required");
  }
  if (options.max_in_flight < 1 || options.max_in_flight > 65535) {
    return absl::InvalidArgumentError("dns resolver: max_in_flight must be 1..65535");
  }
  if (options.upstream_deadline <= std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError("dns resolver: upstream_deadline must be positive");
  }
  Ipv4Endpoint upstream;
  if (options.upstream) {
    upstream = *options.upstream;
  } else {
    DSEC_ASSIGN_OR_RETURN(std::string conf, ReadFile("/etc/resolv.conf"));
    DSEC_ASSIGN_OR_RETURN(upstream, UpstreamFromResolvConf(conf));
  }
  if (upstream.port == 0) return absl::InvalidArgumentError("dns resolver: upstream port 0");

  DSEC_ASSIGN_OR_RETURN(ScopedFd client, BoundUdpSocket(options.listen, /*freebind=*/true));
  sockaddr_in bound{};
  socklen_t bound_len = sizeof(bound);
  if (getsockname(client.get(), reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) {
    return ErrnoStatus("dns resolver: getsockname");
  }
  const Ipv4Endpoint listen = FromSockaddr(bound);
  if (listen == upstream) {
    return absl::InvalidArgumentError(
        absl::StrCat("dns resolver: the upstream ", Format(upstream), " is the resolver itself"));
  }
  // Bound to any address and port: the kernel picks a random ephemeral port.
  DSEC_ASSIGN_OR_RETURN(ScopedFd upstream_fd, BoundUdpSocket(Ipv4Endpoint{}));
  DSEC_ASSIGN_OR_RETURN(EventFd stop, EventFd::Create(EFD_NONBLOCK));
  ScopedFd epoll(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return ErrnoStatus("dns resolver: epoll_create1");
  for (const auto& [fd, tag] : {std::pair{stop.fd(), kStopTag}, std::pair{client.get(), kClientTag},
                                std::pair{upstream_fd.get(), kUpstreamTag}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = tag;
    if (epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
      return ErrnoStatus("dns resolver: epoll_ctl");
  }
  const int stop_fd = stop.fd();
  auto loop = std::make_unique<Loop>(std::move(epoll), std::move(client), std::move(upstream_fd),
                                     upstream, stop_fd, std::move(options));
  std::unique_ptr<Resolver> resolver(new Resolver(listen, std::move(stop), std::move(loop)));
  resolver->thread_ = std::thread([r = resolver.get()] { r->loop_->Run(&r->counters_); });
  return resolver;
}

Resolver::Resolver(Ipv4Endpoint listen_endpoint, EventFd stop, std::unique_ptr<Loop> loop)
    : listen_endpoint_(listen_endpoint), stop_(std::move(stop)), loop_(std::move(loop)) {}

Resolver::~Resolver() {
  // Signal cannot fail on a valid eventfd short of counter overflow.
  DSEC_CHECK_OK(stop_.Signal());
  if (thread_.joinable()) thread_.join();
}

ResolverCounters Resolver::counters() const {
  const auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  return ResolverCounters{
      .queries = get(counters_.queries),
      .refused = get(counters_.refused),
      .forwarded = get(counters_.forwarded),
      .answered = get(counters_.answered),
      .upstream_timeouts = get(counters_.upstream_timeouts),
      .malformed = get(counters_.malformed),
      .upstream_ignored = get(counters_.upstream_ignored),
      .overloaded = get(counters_.overloaded),
  };
}

}  // namespace dsec::network::dns
