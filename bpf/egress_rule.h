// SPDX-License-Identifier: Apache-2.0
// One egress rule of a sandbox's network policy: an address prefix and an
// optional port. Pure parsing and encoding, no BPF: the policy's programs
// (egress.bpf.c) look rules up in longest-prefix-match maps keyed by the
// port (network order, 0 = any) followed by the address.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::bpf {

struct EgressRule {
  bool ipv6 = false;
  std::array<uint8_t, 16> addr{};  // network order; IPv4 in the first 4 bytes
  int prefix_len = 0;              // 0..32 (IPv4) or 0..128 (IPv6)
  uint16_t port = 0;               // host order; 0 = every port

  bool operator==(const EgressRule&) const = default;
};

// Parses "10.1.0.0/16:443", "192.0.2.7" (a /32), "0.0.0.0/0:53",
// "2001:db8::/32", "[2001:db8::1]:443", "[::/0]:80". Address bits beyond the
// prefix must be zero; the port is 1..65535. Errors name the rule.
absl::StatusOr<EgressRule> ParseEgressRule(std::string_view text);

// The rule as ParseEgressRule reads it back.
std::string FormatEgressRule(const EgressRule& rule);

// The bytes of the rule's LPM key (struct key4 / key6 of egress.bpf.c): the
// prefix length as a native u32 (16 port bits plus the address prefix), the
// port in network order, the address (4 or 16 bytes).
std::vector<uint8_t> EgressRuleKey(const EgressRule& rule);

}  // namespace dsec::bpf
