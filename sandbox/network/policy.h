// SPDX-License-Identifier: Apache-2.0
// A sandbox's network request ("network" on create, the body of PATCH
// /v1/sandboxes/{id}/network), read by one pure function:
//
//   {"egress": {"allow": ["10.1.0.0/16:443", "pypi.org:443", "*.debian.org"],
//               "deny":  ["10.1.2.0/24"]}}
//
// A rule is a CIDR rule (bpf/egress_rule.h: an address prefix, optional
// port) or a domain rule (dns/domain_rule.h: a host name or "*.suffix",
// optional port), told apart by syntax. Fuzzed: fuzz/network_spec_fuzzer.cc.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bpf/egress_rule.h"
#include "nlohmann/json.hpp"
#include "sandbox/network/dns/domain_rule.h"

namespace dsec::network {

// At most this many rules in each of allow and deny.
inline constexpr size_t kMaxRulesPerList = 256;

struct EgressSpec {
  std::vector<bpf::EgressRule> allow, deny;
  std::vector<dns::DomainRule> allow_domains, deny_domains;
  // The rules as the client wrote them, in order (what GET shows).
  std::vector<std::string> allow_text, deny_text;
};

struct NetworkSpec {
  EgressSpec egress;
};

// Every error is an InvalidArgument naming the field
// ("network.egress.allow[2]"). `path` prefixes the field names.
absl::StatusOr<NetworkSpec> ParseNetworkSpec(const nlohmann::json& value,
                                             const std::string& path = "network");

// {"egress": {"allow": [...], "deny": [...]}} with the client's texts.
nlohmann::json NetworkSpecJson(const NetworkSpec& spec);

}  // namespace dsec::network
