// SPDX-License-Identifier: Apache-2.0
// The resolver's DNS messages, all built and read with ldns (no DNS wire
// code of our own): owners of ldns objects, the replies the resolver makes
// itself, the query it sends upstream, and the addresses an upstream answer
// gives for a name (following its CNAME chain). Pure, no I/O; used by
// resolver.cc on its thread and by the tests.
#pragma once

#include <ldns/ldns.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bpf/egress_rule.h"

namespace dsec::network::dns {

struct PktFree {
  void operator()(ldns_pkt* p) const { ldns_pkt_free(p); }
};
using PktPtr = std::unique_ptr<ldns_pkt, PktFree>;

// TTLs recorded for resolved addresses are clamped to this range: at least
// one second (a TTL of 0 would allow an address for no time at all, so the
// client's connect would race the expiry), at most five minutes (a sandbox
// keeps an address no longer than that without asking again).
inline constexpr uint32_t kMinTtlS = 1;
inline constexpr uint32_t kMaxTtlS = 300;
uint32_t ClampTtl(uint32_t ttl_s);

// At most this many CNAMEs are followed in one answer.
inline constexpr int kMaxCnameHops = 16;

// The packet in `wire`, or null if ldns cannot parse it.
PktPtr ParsePacket(std::span<const uint8_t> wire);
// The packet's wire form, or empty if ldns cannot encode it.
std::vector<uint8_t> EncodePacket(const ldns_pkt* pkt);

// The one question of `pkt`, or null unless it has exactly one.
const ldns_rr* OnlyQuestion(const ldns_pkt* pkt);

// The name as text in lower case without the root's dot ("pypi.org");
// bytes outside host-name syntax come out escaped by ldns ("a\.b", "\000").
std::string NameText(const ldns_rdf* dname);

// A reply made here to `query` (a response with its id, opcode, RD, and its
// question if it has exactly one), with `rcode`; null if ldns fails.
PktPtr MakeReply(const ldns_pkt* query, ldns_pkt_rcode rcode);

// The query sent upstream for `question` on behalf of a client's query: a
// new packet (the client's other sections and flags are not relayed) with
// `id`, RD set, and EDNS with the client's UDP size if the client used EDNS
// (so that the upstream truncates to what the client can take).
PktPtr MakeUpstreamQuery(const ldns_pkt* client_query, const ldns_rr* question, uint16_t id);

// Whether two questions ask the same (name compared without case, type,
// class).
bool SameQuestion(const ldns_rr* a, const ldns_rr* b);

struct AnswerAddresses {
  // Each a /32 or /128 for every port (the caller sets the rule's port).
  std::vector<bpf::EgressRule> addresses;
  // The smallest TTL of the CNAMEs followed and the addresses, unclamped;
  // meaningless when `addresses` is empty.
  uint32_t ttl_s = 0;
};

// The `qtype` (A or AAAA) records of class IN that `answer`'s answer section
// gives for `qname`, following CNAMEs from `qname` inside that section (at
// most kMaxCnameHops). Records for other names are ignored.
AnswerAddresses AddressesOf(const ldns_pkt* answer, const ldns_rdf* qname, ldns_rr_type qtype);

// Lowers every TTL in `pkt`'s answer section to at most `ttl_s`, so that a
// client caching the answer does not outlive what was recorded for it.
void CapAnswerTtls(ldns_pkt* pkt, uint32_t ttl_s);

}  // namespace dsec::network::dns
