// SPDX-License-Identifier: Apache-2.0
// The resolver against a fake upstream the test drives step by step: both
// are UDP sockets on 127.0.0.1 (the unknown client is 127.0.0.2), every wait
// is a poll with a deadline. No root needed.
#include "sandbox/network/dns/resolver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/scoped_fd.h"
#include "gtest/gtest.h"
#include "sandbox/network/dns/message.h"

namespace dsec::network::dns {
namespace {

constexpr int kWaitMs = 5000;  // a bound for things that happen at once
const Ipv4Address kSandbox = {127, 0, 0, 1};
const Ipv4Address kStranger = {127, 0, 0, 2};

ScopedFd UdpSocket(const Ipv4Address& addr) {
  ScopedFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  EXPECT_TRUE(fd.valid());
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  std::memcpy(&sa.sin_addr.s_addr, addr.data(), 4);
  EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0)
      << std::strerror(errno);
  return fd;
}

Ipv4Endpoint LocalEndpoint(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof(sa);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  Ipv4Endpoint ep;
  std::memcpy(ep.address.data(), &sa.sin_addr.s_addr, 4);
  ep.port = ntohs(sa.sin_port);
  return ep;
}

void SendTo(int fd, const std::vector<uint8_t>& wire, const Ipv4Endpoint& to) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  std::memcpy(&sa.sin_addr.s_addr, to.address.data(), 4);
  sa.sin_port = htons(to.port);
  ASSERT_EQ(sendto(fd, wire.data(), wire.size(), 0, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)),
            static_cast<ssize_t>(wire.size()))
      << std::strerror(errno);
}

// The next datagram on `fd` within `ms`, or nullopt.
std::optional<std::vector<uint8_t>> Receive(int fd, int ms = kWaitMs,
                                            Ipv4Endpoint* from = nullptr) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, ms) != 1) return std::nullopt;
  std::vector<uint8_t> buf(65535);
  sockaddr_in sa{};
  socklen_t len = sizeof(sa);
  const ssize_t n = recvfrom(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&sa), &len);
  if (n < 0) return std::nullopt;
  buf.resize(static_cast<size_t>(n));
  if (from != nullptr) {
    std::memcpy(from->address.data(), &sa.sin_addr.s_addr, 4);
    from->port = ntohs(sa.sin_port);
  }
  return buf;
}

PktPtr Query(const char* name, ldns_rr_type type, uint16_t id) {
  PktPtr q(ldns_pkt_query_new(ldns_dname_new_frm_str(name), type, LDNS_RR_CLASS_IN, LDNS_RD));
  EXPECT_NE(q, nullptr);
  ldns_pkt_set_id(q.get(), id);
  return q;
}

std::vector<uint8_t> Wire(const ldns_pkt* p) {
  std::vector<uint8_t> w = EncodePacket(p);
  EXPECT_FALSE(w.empty());
  return w;
}

// An answer to `query` with `id` and the records in zone-file syntax.
PktPtr Answer(const ldns_pkt* query, uint16_t id, const std::vector<std::string>& records,
              ldns_pkt_rcode rcode = LDNS_RCODE_NOERROR) {
  PktPtr a = MakeReply(query, rcode);
  EXPECT_NE(a, nullptr);
  ldns_pkt_set_id(a.get(), id);
  for (const std::string& text : records) {
    ldns_rr* rr = nullptr;
    EXPECT_EQ(ldns_rr_new_frm_str(&rr, text.c_str(), 0, nullptr, nullptr), LDNS_STATUS_OK) << text;
    EXPECT_TRUE(ldns_pkt_push_rr(a.get(), LDNS_SECTION_ANSWER, rr));
  }
  return a;
}

std::vector<std::string> AnswerTexts(const ldns_pkt* p) {
  std::vector<std::string> out;
  const ldns_rr_list* rrs = ldns_pkt_answer(p);
  for (size_t i = 0; rrs != nullptr && i < ldns_rr_list_rr_count(rrs); ++i) {
    char* s = ldns_rr2str(ldns_rr_list_rr(rrs, i));
    std::string t(s);
    free(s);
    while (!t.empty() && t.back() == '\n') t.pop_back();
    out.push_back(t);
  }
  return out;
}

struct Resolved {
  Ipv4Address client;
  DomainRule rule;
  std::vector<std::string> addresses;  // FormatEgressRule
  uint32_t ttl_s;
};

class ResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    upstream_ = UdpSocket({127, 0, 0, 1});
    client_ = UdpSocket(kSandbox);
    for (const char* r : {"a.allowed.test:443", "*.allowed.test", "six.test:8443", "cname.test"}) {
      auto rule = ParseDomainRule(r);
      ASSERT_TRUE(rule.ok()) << rule.status();
      rules_.push_back(*rule);
    }
  }

  void Start(Resolver::Options options = {}) {
    options.listen = Ipv4Endpoint{kSandbox, 0};
    options.upstream = LocalEndpoint(upstream_.get());
    options.policy = [this](const Ipv4Address& client) -> std::optional<DomainPolicy> {
      if (client != kSandbox) return std::nullopt;
      return DomainPolicy{rules_, deny_};
    };
    options.on_resolved = [this](const Ipv4Address& client, const DomainRule& rule,
                                 std::vector<bpf::EgressRule> addresses, uint32_t ttl_s) {
      std::vector<std::string> texts;
      for (const auto& a : addresses) texts.push_back(bpf::FormatEgressRule(a));
      absl::MutexLock lock(&mu_);
      resolved_.push_back(Resolved{client, rule, texts, ttl_s});
    };
    auto r = Resolver::Create(std::move(options));
    ASSERT_TRUE(r.ok()) << r.status();
    resolver_ = std::move(*r);
    listen_ = resolver_->listen_endpoint();
  }

  // Sends `query` from the sandbox, then reads what the resolver forwarded
  // to the upstream (with the resolver's address in *from).
  PktPtr Forwarded(const ldns_pkt* query, Ipv4Endpoint* from) {
    SendTo(client_.get(), Wire(query), listen_);
    auto wire = Receive(upstream_.get(), kWaitMs, from);
    if (!wire) return nullptr;
    return ParsePacket(*wire);
  }

  PktPtr ClientReceive(int fd = -1) {
    auto wire = Receive(fd < 0 ? client_.get() : fd);
    if (!wire) return nullptr;
    return ParsePacket(*wire);
  }

  std::vector<Resolved> TakeResolved() {
    absl::MutexLock lock(&mu_);
    return std::exchange(resolved_, {});
  }

  ScopedFd upstream_;
  ScopedFd client_;
  std::vector<DomainRule> rules_;
  std::vector<DomainRule> deny_;
  Ipv4Endpoint listen_;
  absl::Mutex mu_;
  std::vector<Resolved> resolved_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Resolver> resolver_;  // last: destroyed first
};

TEST_F(ResolverTest, RefusesNameNoRuleAllowsWithoutForwarding) {
  Start();
  PktPtr q = Query("evil.test.", LDNS_RR_TYPE_A, 0x4242);
  SendTo(client_.get(), Wire(q.get()), listen_);
  PktPtr reply = ClientReceive();
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(ldns_pkt_id(reply.get()), 0x4242);
  EXPECT_TRUE(ldns_pkt_qr(reply.get()));
  EXPECT_EQ(ldns_pkt_get_rcode(reply.get()), LDNS_RCODE_REFUSED);
  // "allowed.test" itself: the wildcard is strictly below it.
  PktPtr apex = Query("allowed.test.", LDNS_RR_TYPE_A, 0x4243);
  SendTo(client_.get(), Wire(apex.get()), listen_);
  reply = ClientReceive();
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(ldns_pkt_get_rcode(reply.get()), LDNS_RCODE_REFUSED);
  const ResolverCounters c = resolver_->counters();
  EXPECT_EQ(c.queries, 2u);
  EXPECT_EQ(c.refused, 2u);
  EXPECT_EQ(c.forwarded, 0u);  // the reply is sent where a forward would have been
  EXPECT_TRUE(TakeResolved().empty());
}

TEST_F(ResolverTest, ADenyRuleRefusesANameAnAllowWildcardCovers) {
  deny_ = {*ParseDomainRule("bad.allowed.test")};
  Start();
  PktPtr q = Query("bad.allowed.test.", LDNS_RR_TYPE_A, 0x5151);
  SendTo(client_.get(), Wire(q.get()), listen_);
  PktPtr reply = ClientReceive();
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(ldns_pkt_get_rcode(reply.get()), LDNS_RCODE_REFUSED);
  EXPECT_EQ(resolver_->counters().forwarded, 0u);
  // A sibling the deny rule does not name is still forwarded.
  Ipv4Endpoint from;
  PktPtr ok = Query("good.allowed.test.", LDNS_RR_TYPE_A, 0x5152);
  EXPECT_NE(Forwarded(ok.get(), &from), nullptr);
}

TEST_F(ResolverTest, RefusesUnknownClient) {
  Start();
  ScopedFd stranger = UdpSocket(kStranger);
  PktPtr q = Query("a.allowed.test.", LDNS_RR_TYPE_A, 7);
  SendTo(stranger.get(), Wire(q.get()), listen_);
  PktPtr reply = ClientReceive(stranger.get());
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(ldns_pkt_id(reply.get()), 7);
  EXPECT_EQ(ldns_pkt_get_rcode(reply.get()), LDNS_RCODE_REFUSED);
  EXPECT_EQ(resolver_->counters().forwarded, 0u);
}

TEST_F(ResolverTest, ForwardsAllowedQueryRecordsAddressesAndRewritesId) {
  Start();
  PktPtr q = Query("A.Allowed.Test.", LDNS_RR_TYPE_A, 0x1234);
  Ipv4Endpoint from;
  PktPtr up = Forwarded(q.get(), &from);
  ASSERT_NE(up, nullptr);
  EXPECT_FALSE(ldns_pkt_qr(up.get()));
  ASSERT_NE(OnlyQuestion(up.get()), nullptr);
  EXPECT_TRUE(SameQuestion(OnlyQuestion(up.get()), OnlyQuestion(q.get())));
  const uint16_t upstream_id = ldns_pkt_id(up.get());
  PktPtr a = Answer(up.get(), upstream_id,
                    {"a.allowed.test. 60 IN A 192.0.2.1", "a.allowed.test. 30 IN A 192.0.2.2"});
  SendTo(upstream_.get(), Wire(a.get()), from);

  PktPtr reply = ClientReceive();
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(ldns_pkt_id(reply.get()), 0x1234);
  EXPECT_EQ(ldns_pkt_get_rcode(reply.get()), LDNS_RCODE_NOERROR);
  EXPECT_EQ(AnswerTexts(reply.get()).size(), 2u);

  // Two rules allow the name: each gets the addresses with its own port.
  std::vector<Resolved> got = TakeResolved();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].client, kSandbox);
  EXPECT_EQ(FormatDomainRule(got[0].rule), "a.allowed.test:443");
  EXPECT_EQ(got[0].addresses, (std::vector<std::string>{"192.0.2.1/32:443", "192.0.2.2/32:443"}));
  EXPECT_EQ(got[0].ttl_s, 30u);
  EXPECT_EQ(FormatDomainRule(got[1].rule), "*.allowed.test");
  EXPECT_EQ(got[1].addresses, (std::vector<std::string>{"192.0.2.1/32", "192.0.2.2/32"}));
  EXPECT_EQ(got[1].ttl_s, 30u);
  const ResolverCounters c = resolver_->counters();
  EXPECT_EQ(c.forwarded, 1u);
  EXPECT_EQ(c.answered, 1u);
}

TEST_F(ResolverTest, UpstreamIdsAreFreshPerQuery) {
  Start();
  // Same client id four times: the upstream sees ids of the resolver's own.
  std::vector<uint16_t> ids;
  for (int i = 0; i < 4; ++i) {
    PktPtr q = Query("x.allowed.test.", LDNS_RR_TYPE_A, 1);
    Ipv4Endpoint from;
    PktPtr up = Forwarded(q.get(), &from);
    ASSERT_NE(up, nullptr);
    ids.push_back(ldns_pkt_id(up.get()));
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::unique(ids.begin(), ids.end()), ids.end());  // in flight together: distinct
}

TEST_F(ResolverTest, ClampsTtlAndCapsTheRelayedAnswer) {
  Start();
  struct Case {
    uint32_t upstream_ttl;
    uint32_t recorded;
  };
  uint16_t id = 100;
  for (const Case& c : {Case{3600, 300}, Case{0, 1}, Case{42, 42}}) {
    PktPtr q = Query("ttl.allowed.test.", LDNS_RR_TYPE_A, ++id);
    Ipv4Endpoint from;
    PktPtr up = Forwarded(q.get(), &from);
    ASSERT_NE(up, nullptr);
    PktPtr a = Answer(up.get(), ldns_pkt_id(up.get()),
                      {absl::StrCat("ttl.allowed.test. ", c.upstream_ttl, " IN A 192.0.2.9")});
    SendTo(upstream_.get(), Wire(a.get()), from);
    PktPtr reply = ClientReceive();
    ASSERT_NE(reply, nullptr);
    ASSERT_EQ(ldns_rr_list_rr_count(ldns_pkt_answer(reply.get())), 1u);
    // The client never caches longer than the address stays allowed.
    EXPECT_EQ(ldns_rr_ttl(ldns_rr_list_rr(ldns_pkt_answer(reply.get()), 0)),
              std::min(c.upstream_ttl, c.recorded));
    std::vector<Resolved> got = TakeResolved();
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].ttl_s, c.recorded) << c.upstream_ttl;
  }
}

TEST_F(ResolverTest, FollowsCnameChainInsideTheAnswer) {
  Start();
  PktPtr q = Query("cname.test.", LDNS_RR_TYPE_A, 9);
  Ipv4Endpoint from;
  PktPtr up = Forwarded(q.get(), &from);
  ASSERT_NE(up, nullptr);
  PktPtr a = Answer(
      up.get(), ldns_pkt_id(up.get()),
      {"cname.test. 100 IN CNAME mid.elsewhere.test.",
       "mid.elsewhere.test. 50 IN CNAME edge.cdn.test.", "edge.cdn.test. 200 IN A 192.0.2.20",
       "edge.cdn.test. 200 IN A 192.0.2.21", "unrelated.test. 200 IN A 198.51.100.1"});
  SendTo(upstream_.get(), Wire(a.get()), from);
  PktPtr reply = ClientReceive();
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(ldns_pkt_id(reply.get()), 9);
  std::vector<Resolved> got = TakeResolved();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].addresses, (std::vector<std::string>{"192.0.2.20/32", "192.0.2.21/32"}));
  EXPECT_EQ(got[0].ttl_s, 50u);  // the chain is only as fresh as its weakest link
}

TEST_F(ResolverTest, RecordsAaaaWithTheRulePort) {
  Start();
  PktPtr q = Query("six.test.", LDNS_RR_TYPE_AAAA, 6);
  Ipv4Endpoint from;
  PktPtr up = Forwarded(q.get(), &from);
  ASSERT_NE(up, nullptr);
  // An A record in an AAAA answer is not what was asked: not recorded.
  PktPtr a = Answer(up.get(), ldns_pkt_id(up.get()),
                    {"six.test. 120 IN AAAA 2001:db8::6", "six.test. 120 IN A 192.0.2.6"});
  SendTo(upstream_.get(), Wire(a.get()), from);
  ASSERT_NE(ClientReceive(), nullptr);
  std::vector<Resolved> got = TakeResolved();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].addresses, (std::vector<std::string>{"[2001:db8::6/128]:8443"}));
  EXPECT_EQ(got[0].ttl_s, 120u);
}

TEST_F(ResolverTest, OtherTypesAndErrorsAreRelayedButNotRecorded) {
  Start();
  PktPtr q = Query("txt.allowed.test.", LDNS_RR_TYPE_TXT, 11);
  Ipv4Endpoint from;
  PktPtr up = Forwarded(q.get(), &from);
  ASSERT_NE(up, nullptr);
  PktPtr a = Answer(up.get(), ldns_pkt_id(up.get()), {"txt.allowed.test. 60 IN TXT \"hello\""});
  SendTo(upstream_.get(), Wire(a.get()), from);
  PktPtr reply = ClientReceive();
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(AnswerTexts(reply.get()).size(), 1u);

  PktPtr nx = Query("gone.allowed.test.", LDNS_RR_TYPE_A, 12);
  up = Forwarded(nx.get(), &from);
  ASSERT_NE(up, nullptr);
  a = Answer(up.get(), ldns_pkt_id(up.get()), {}, LDNS_RCODE_NXDOMAIN);
  SendTo(upstream_.get(), Wire(a.get()), from);
  reply = ClientReceive();
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(ldns_pkt_id(reply.get()), 12);
  EXPECT_EQ(ldns_pkt_get_rcode(reply.get()), LDNS_RCODE_NXDOMAIN);
  EXPECT_TRUE(TakeResolved().empty());
}

TEST_F(ResolverTest, IgnoresSpoofedAndMismatchedAnswers) {
  Start();
  PktPtr q = Query("spoof.allowed.test.", LDNS_RR_TYPE_A, 77);
  Ipv4Endpoint resolver_side;
  PktPtr up = Forwarded(q.get(), &resolver_side);
  ASSERT_NE(up, nullptr);
  const uint16_t id = ldns_pkt_id(up.get());
  // Right id and question, wrong source port.
  ScopedFd spoofer = UdpSocket({127, 0, 0, 1});
  PktPtr forged = Answer(up.get(), id, {"spoof.allowed.test. 60 IN A 203.0.113.66"});
  SendTo(spoofer.get(), Wire(forged.get()), resolver_side);
  // Right source, wrong id.
  forged =
      Answer(up.get(), static_cast<uint16_t>(id + 1), {"spoof.allowed.test. 60 IN A 203.0.113.67"});
  SendTo(upstream_.get(), Wire(forged.get()), resolver_side);
  // Right source and id, another question.
  PktPtr other = Query("other.allowed.test.", LDNS_RR_TYPE_A, id);
  forged = Answer(other.get(), id, {"other.allowed.test. 60 IN A 203.0.113.68"});
  SendTo(upstream_.get(), Wire(forged.get()), resolver_side);
  // Garbage from the right source.
  SendTo(upstream_.get(), {0xde, 0xad}, resolver_side);
  // The real answer.
  PktPtr real = Answer(up.get(), id, {"spoof.allowed.test. 60 IN A 192.0.2.50"});
  SendTo(upstream_.get(), Wire(real.get()), resolver_side);

  PktPtr reply = ClientReceive();
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(ldns_pkt_id(reply.get()), 77);
  EXPECT_EQ(AnswerTexts(reply.get()),
            (std::vector<std::string>{"spoof.allowed.test.\t60\tIN\tA\t192.0.2.50"}));
  std::vector<Resolved> got = TakeResolved();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].addresses, (std::vector<std::string>{"192.0.2.50/32"}));
  EXPECT_EQ(resolver_->counters().upstream_ignored, 4u);
  EXPECT_EQ(resolver_->counters().answered, 1u);
}

TEST_F(ResolverTest, UpstreamTimeoutIsServfail) {
  Resolver::Options options;
  options.upstream_deadline = std::chrono::milliseconds(100);
  Start(std::move(options));
  PktPtr q = Query("silent.allowed.test.", LDNS_RR_TYPE_A, 0xbeef);
  Ipv4Endpoint from;
  PktPtr up = Forwarded(q.get(), &from);
  ASSERT_NE(up, nullptr);
  PktPtr reply = ClientReceive();  // the upstream never answers
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(ldns_pkt_id(reply.get()), 0xbeef);
  EXPECT_EQ(ldns_pkt_get_rcode(reply.get()), LDNS_RCODE_SERVFAIL);
  EXPECT_EQ(resolver_->counters().upstream_timeouts, 1u);
  // A late answer finds no query.
  PktPtr late =
      Answer(up.get(), ldns_pkt_id(up.get()), {"silent.allowed.test. 60 IN A 192.0.2.99"});
  SendTo(upstream_.get(), Wire(late.get()), from);
  // A following query is still served, after the late answer was read.
  PktPtr next = Query("evil.test.", LDNS_RR_TYPE_A, 1);
  SendTo(client_.get(), Wire(next.get()), listen_);
  ASSERT_NE(ClientReceive(), nullptr);
  EXPECT_TRUE(TakeResolved().empty());
}

TEST_F(ResolverTest, SurvivesMalformedQueries) {
  Start();
  // Replies come in the order of the queries: a refused marker query after
  // a batch shows that the resolver has dealt with the whole batch (and
  // keeps the batches within the socket's receive buffer).
  uint16_t marker_id = 0xf000;
  const auto sync = [&] {
    PktPtr marker = Query("evil.test.", LDNS_RR_TYPE_A, ++marker_id);
    SendTo(client_.get(), Wire(marker.get()), listen_);
    while (true) {
      PktPtr r = ClientReceive();
      ASSERT_NE(r, nullptr);
      if (ldns_pkt_id(r.get()) == marker_id && ldns_pkt_get_rcode(r.get()) == LDNS_RCODE_REFUSED)
        return;
    }
  };
  std::mt19937 rng(19);
  for (int batch = 0; batch < 10; ++batch) {
    for (int i = 0; i < 20; ++i) {
      std::vector<uint8_t> junk(rng() % 600);
      for (auto& b : junk) b = static_cast<uint8_t>(rng());
      SendTo(client_.get(), junk, listen_);
    }
    sync();
  }
  const uint64_t malformed_before = resolver_->counters().malformed;  // exact: all answered
  SendTo(client_.get(), {0x12, 0x34, 0x01, 0x00, 0x00}, listen_);     // truncated header
  SendTo(client_.get(), {}, listen_);                                 // empty datagram
  // A response sent as a query is dropped, never answered.
  PktPtr response = Query("a.allowed.test.", LDNS_RR_TYPE_A, 3);
  ldns_pkt_set_qr(response.get(), true);
  SendTo(client_.get(), Wire(response.get()), listen_);

  // No question: FORMERR.
  PktPtr none(ldns_pkt_new());
  ldns_pkt_set_id(none.get(), 0x0a0a);
  SendTo(client_.get(), Wire(none.get()), listen_);
  PktPtr reply = ClientReceive();
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(ldns_pkt_id(reply.get()), 0x0a0a);
  EXPECT_EQ(ldns_pkt_get_rcode(reply.get()), LDNS_RCODE_FORMERR);

  // Five questions: FORMERR.
  PktPtr five = Query("a.allowed.test.", LDNS_RR_TYPE_A, 0x0b0b);
  for (int i = 0; i < 4; ++i) {
    ldns_rr* extra = ldns_rr_clone(OnlyQuestion(Query("b.allowed.test.", LDNS_RR_TYPE_A, 0).get()));
    ASSERT_TRUE(ldns_pkt_push_rr(five.get(), LDNS_SECTION_QUESTION, extra));
  }
  ASSERT_EQ(ldns_pkt_qdcount(five.get()), 5);
  SendTo(client_.get(), Wire(five.get()), listen_);
  reply = ClientReceive();
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(ldns_pkt_id(reply.get()), 0x0b0b);
  EXPECT_EQ(ldns_pkt_get_rcode(reply.get()), LDNS_RCODE_FORMERR);

  // Still serving.
  PktPtr q = Query("ok.allowed.test.", LDNS_RR_TYPE_A, 0x0c0c);
  Ipv4Endpoint from;
  PktPtr up = Forwarded(q.get(), &from);
  ASSERT_NE(up, nullptr);
  PktPtr a = Answer(up.get(), ldns_pkt_id(up.get()), {"ok.allowed.test. 60 IN A 192.0.2.77"});
  SendTo(upstream_.get(), Wire(a.get()), from);
  reply = ClientReceive();
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(ldns_pkt_id(reply.get()), 0x0c0c);
  const ResolverCounters c = resolver_->counters();
  EXPECT_EQ(c.queries, 216u);  // with the 10 markers
  // Truncated, empty, response, no question, five questions.
  EXPECT_EQ(c.malformed, malformed_before + 5);
  EXPECT_EQ(c.answered, 1u);
}

TEST_F(ResolverTest, OverloadIsServfailAndDestructionJoinsWithQueriesInFlight) {
  Resolver::Options options;
  options.max_in_flight = 2;
  options.upstream_deadline = std::chrono::milliseconds(60'000);
  Start(std::move(options));
  for (uint16_t id = 1; id <= 2; ++id) {
    PktPtr q = Query("slow.allowed.test.", LDNS_RR_TYPE_A, id);
    Ipv4Endpoint from;
    ASSERT_NE(Forwarded(q.get(), &from), nullptr);
  }
  PktPtr third = Query("slow.allowed.test.", LDNS_RR_TYPE_A, 3);
  SendTo(client_.get(), Wire(third.get()), listen_);
  PktPtr reply = ClientReceive();
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(ldns_pkt_id(reply.get()), 3);
  EXPECT_EQ(ldns_pkt_get_rcode(reply.get()), LDNS_RCODE_SERVFAIL);
  EXPECT_EQ(resolver_->counters().overloaded, 1u);

  const Ipv4Endpoint listen = resolver_->listen_endpoint();
  resolver_.reset();  // returns although two queries wait 60 s upstream
  // The listen socket is closed: its port can be bound again.
  ScopedFd again(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  std::memcpy(&sa.sin_addr.s_addr, listen.address.data(), 4);
  sa.sin_port = htons(listen.port);
  EXPECT_EQ(bind(again.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0)
      << std::strerror(errno);
}

TEST(ResolverCreateTest, RejectsBadOptions) {
  Resolver::Options o;
  o.listen = Ipv4Endpoint{kSandbox, 0};
  o.upstream = Ipv4Endpoint{kSandbox, 53};
  EXPECT_EQ(Resolver::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);  // no callbacks
  o.policy = [](const Ipv4Address&) { return std::optional<DomainPolicy>(); };
  o.on_resolved = [](const Ipv4Address&, const DomainRule&, std::vector<bpf::EgressRule>,
                     uint32_t) {};
  o.max_in_flight = 0;
  EXPECT_EQ(Resolver::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.max_in_flight = 256;
  o.upstream_deadline = std::chrono::milliseconds(0);
  EXPECT_EQ(Resolver::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.upstream_deadline = std::chrono::milliseconds(2000);
  // The upstream is the resolver itself.
  ScopedFd probe = UdpSocket(kSandbox);
  const Ipv4Endpoint taken = LocalEndpoint(probe.get());
  probe = ScopedFd();
  o.listen = taken;
  o.upstream = taken;
  EXPECT_EQ(Resolver::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ResolvConfTest, TakesFirstIpv4Nameserver) {
  auto ep = UpstreamFromResolvConf(
      "# generated\n; comment\nsearch example.com\nnameserver 2001:db8::53\n"
      "  nameserver\t10.0.0.53  # trailing\nnameserver 10.0.0.54\n");
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_EQ(ep->address, (Ipv4Address{10, 0, 0, 53}));
  EXPECT_EQ(ep->port, 53);
}

TEST(ResolvConfTest, NotFoundWithoutIpv4Nameserver) {
  for (const char* text : {"", "nameserver ::1\n", "#nameserver 10.0.0.1\n", "nameserver\n",
                           "nameserver 10.0.0\n", "nameservers 10.0.0.1\n"}) {
    EXPECT_EQ(UpstreamFromResolvConf(text).status().code(), absl::StatusCode::kNotFound) << text;
  }
}

TEST(Ipv4EndpointTest, Parses) {
  auto ep = ParseIpv4Endpoint("127.0.0.9:5353");
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_EQ(ep->address, (Ipv4Address{127, 0, 0, 9}));
  EXPECT_EQ(ep->port, 5353);
  for (const char* bad :
       {"127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:+53", "::1:53", "x:53"}) {
    EXPECT_FALSE(ParseIpv4Endpoint(bad).ok()) << bad;
  }
}

TEST(AddressesOfTest, CnameLoopRecordsNothing) {
  PktPtr q = Query("loop.test.", LDNS_RR_TYPE_A, 1);
  PktPtr a = Answer(q.get(), 1,
                    {"loop.test. 60 IN CNAME back.test.", "back.test. 60 IN CNAME loop.test.",
                     "loop.test. 60 IN A 192.0.2.1"});
  const AnswerAddresses found =
      AddressesOf(a.get(), ldns_rr_owner(OnlyQuestion(q.get())), LDNS_RR_TYPE_A);
  EXPECT_TRUE(found.addresses.empty());
}

TEST(AddressesOfTest, IgnoresOtherClassesAndDuplicates) {
  PktPtr q = Query("d.test.", LDNS_RR_TYPE_A, 1);
  PktPtr a = Answer(
      q.get(), 1,
      {"d.test. 60 IN A 192.0.2.1", "d.test. 90 IN A 192.0.2.1", "d.test. 60 CH A 192.0.2.2"});
  const AnswerAddresses found =
      AddressesOf(a.get(), ldns_rr_owner(OnlyQuestion(q.get())), LDNS_RR_TYPE_A);
  ASSERT_EQ(found.addresses.size(), 1u);
  EXPECT_EQ(bpf::FormatEgressRule(found.addresses[0]), "192.0.2.1/32");
  EXPECT_EQ(found.ttl_s, 60u);
}

}  // namespace
}  // namespace dsec::network::dns
