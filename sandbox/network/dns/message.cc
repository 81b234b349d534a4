// SPDX-License-Identifier: Apache-2.0
#include "sandbox/network/dns/message.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/ascii.h"

namespace dsec::network::dns {
namespace {

// RFC 6891 6.2.3: an EDNS UDP size below 512 is treated as 512. Above 4096
// gains nothing on the node's bridge and invites fragmentation.
constexpr uint16_t kMinEdnsUdpSize = 512;
constexpr uint16_t kMaxEdnsUdpSize = 4096;

bool IsNamed(const ldns_rr* rr, const ldns_rdf* name) {
  return ldns_rr_get_class(rr) == LDNS_RR_CLASS_IN &&
         ldns_dname_compare(ldns_rr_owner(rr), name) == 0;
}

}  // namespace

uint32_t ClampTtl(uint32_t ttl_s) { return std::clamp(ttl_s, kMinTtlS, kMaxTtlS); }

PktPtr ParsePacket(std::span<const uint8_t> wire) {
  ldns_pkt* pkt = nullptr;
  if (ldns_wire2pkt(&pkt, wire.data(), wire.size()) != LDNS_STATUS_OK) {
    ldns_pkt_free(pkt);  // null-safe
    return nullptr;
  }
  return PktPtr(pkt);
}

std::vector<uint8_t> EncodePacket(const ldns_pkt* pkt) {
  uint8_t* wire = nullptr;
  size_t size = 0;
  if (ldns_pkt2wire(&wire, pkt, &size) != LDNS_STATUS_OK) {
    std::free(wire);  // ldns allocates with malloc (LDNS_XMALLOC)
    return {};
  }
  std::vector<uint8_t> out(wire, wire + size);
  std::free(wire);
  return out;
}

const ldns_rr* OnlyQuestion(const ldns_pkt* pkt) {
  const ldns_rr_list* q = ldns_pkt_question(pkt);
  if (q == nullptr || ldns_rr_list_rr_count(q) != 1) return nullptr;
  return ldns_rr_list_rr(q, 0);
}

std::string NameText(const ldns_rdf* dname) {
  char* text = ldns_rdf2str(dname);
  if (text == nullptr) return {};
  std::string out(text);
  std::free(text);
  if (!out.empty() && out.back() == '.') out.pop_back();
  absl::AsciiStrToLower(&out);
  return out;
}

PktPtr MakeReply(const ldns_pkt* query, ldns_pkt_rcode rcode) {
  PktPtr reply(ldns_pkt_new());
  if (!reply) return nullptr;
  ldns_pkt_set_id(reply.get(), ldns_pkt_id(query));
  ldns_pkt_set_qr(reply.get(), true);
  ldns_pkt_set_opcode(reply.get(), ldns_pkt_get_opcode(query));
  ldns_pkt_set_rd(reply.get(), ldns_pkt_rd(query));
  ldns_pkt_set_ra(reply.get(), true);
  ldns_pkt_set_rcode(reply.get(), static_cast<uint8_t>(rcode));
  if (const ldns_rr* q = OnlyQuestion(query)) {
    ldns_rr* copy = ldns_rr_clone(q);
    if (copy == nullptr || !ldns_pkt_push_rr(reply.get(), LDNS_SECTION_QUESTION, copy)) {
      ldns_rr_free(copy);
      return nullptr;
    }
  }
  return reply;
}

PktPtr MakeUpstreamQuery(const ldns_pkt* client_query, const ldns_rr* question, uint16_t id) {
  ldns_rdf* name = ldns_rdf_clone(ldns_rr_owner(question));
  if (name == nullptr) return nullptr;
  // ldns_pkt_query_new takes ownership of the name.
  PktPtr query(
      ldns_pkt_query_new(name, ldns_rr_get_type(question), ldns_rr_get_class(question), LDNS_RD));
  if (!query) return nullptr;
  ldns_pkt_set_id(query.get(), id);
  if (ldns_pkt_edns(client_query)) {
    ldns_pkt_set_edns_udp_size(query.get(), std::clamp(ldns_pkt_edns_udp_size(client_query),
                                                       kMinEdnsUdpSize, kMaxEdnsUdpSize));
  }
  return query;
}

bool SameQuestion(const ldns_rr* a, const ldns_rr* b) {
  return ldns_rr_get_type(a) == ldns_rr_get_type(b) &&
         ldns_rr_get_class(a) == ldns_rr_get_class(b) &&
         ldns_dname_compare(ldns_rr_owner(a), ldns_rr_owner(b)) == 0;
}

AnswerAddresses AddressesOf(const ldns_pkt* answer, const ldns_rdf* qname, ldns_rr_type qtype) {
  AnswerAddresses out;
  const ldns_rr_list* rrs = ldns_pkt_answer(answer);
  if (rrs == nullptr || (qtype != LDNS_RR_TYPE_A && qtype != LDNS_RR_TYPE_AAAA)) return out;
  const size_t count = ldns_rr_list_rr_count(rrs);
  uint32_t ttl = std::numeric_limits<uint32_t>::max();
  const ldns_rdf* name = qname;
  for (int hop = 0; hop <= kMaxCnameHops; ++hop) {
    const ldns_rr* cname = nullptr;
    for (size_t i = 0; i < count && cname == nullptr; ++i) {
      const ldns_rr* rr = ldns_rr_list_rr(rrs, i);
      if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_CNAME && IsNamed(rr, name) &&
          ldns_rr_rd_count(rr) == 1 &&
          ldns_rdf_get_type(ldns_rr_rdf(rr, 0)) == LDNS_RDF_TYPE_DNAME) {
        cname = rr;
      }
    }
    if (cname == nullptr) break;
    if (hop == kMaxCnameHops) return {};  // too long, or a loop: nothing recorded
    ttl = std::min(ttl, ldns_rr_ttl(cname));
    name = ldns_rr_rdf(cname, 0);
  }
  const bool v6 = qtype == LDNS_RR_TYPE_AAAA;
  const size_t addr_len = v6 ? 16 : 4;
  for (size_t i = 0; i < count; ++i) {
    const ldns_rr* rr = ldns_rr_list_rr(rrs, i);
    if (ldns_rr_get_type(rr) != qtype || !IsNamed(rr, name) || ldns_rr_rd_count(rr) != 1) continue;
    const ldns_rdf* rdata = ldns_rr_rdf(rr, 0);
    if (ldns_rdf_size(rdata) != addr_len) continue;
    bpf::EgressRule addr;
    addr.ipv6 = v6;
    addr.prefix_len = v6 ? 128 : 32;
    std::memcpy(addr.addr.data(), ldns_rdf_data(rdata), addr_len);
    if (std::find(out.addresses.begin(), out.addresses.end(), addr) == out.addresses.end()) {
      out.addresses.push_back(addr);
    }
    ttl = std::min(ttl, ldns_rr_ttl(rr));
  }
  out.ttl_s = ttl;
  return out;
}

void CapAnswerTtls(ldns_pkt* pkt, uint32_t ttl_s) {
  const ldns_rr_list* rrs = ldns_pkt_answer(pkt);
  if (rrs == nullptr) return;
  for (size_t i = 0; i < ldns_rr_list_rr_count(rrs); ++i) {
    ldns_rr* rr = ldns_rr_list_rr(rrs, i);
    if (ldns_rr_ttl(rr) > ttl_s) ldns_rr_set_ttl(rr, ttl_s);
  }
}

}  // namespace dsec::network::dns
