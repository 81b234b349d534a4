// SPDX-License-Identifier: Apache-2.0
// Domain rules of a sandbox's egress policy ("pypi.org:443", "*.debian.org")
// and the one question the node resolver asks of them: may this sandbox
// resolve this name? Pure parsing and matching, no I/O (fuzzed:
// fuzz/domain_rule_fuzzer.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace dsec::network::dns {

struct DomainRule {
  // Lower case, no trailing dot. For a wildcard rule, the name below which
  // every name matches ("debian.org" for "*.debian.org").
  std::string pattern;
  bool wildcard = false;
  uint16_t port = 0;  // host order; 0 = every port

  bool operator==(const DomainRule&) const = default;
};

// Parses "pypi.org:443", "PyPI.org." (case and one trailing dot are
// normalised away), "*.debian.org", "*.debian.org:80". The name is host-name
// syntax (RFC 1123): labels of 1..63 characters [a-z0-9-], none starting or
// ending with '-', at most 253 characters, at least two labels, the last one
// not all digits (so that an IPv4 address is never taken for a name). "*." is
// allowed only as the whole first label, and the name after it must itself
// have two labels ("*.org" and a bare "*" are refused). The port is 1..65535
// in decimal digits. Errors are InvalidArgument and name the rule.
absl::StatusOr<DomainRule> ParseDomainRule(std::string_view text);

// The rule as ParseDomainRule reads it back ("*.debian.org:80").
std::string FormatDomainRule(const DomainRule& rule);

// Whether `qname` (any case, with or without the root's trailing dot) is
// allowed by `rule`: a plain rule matches its name only; a wildcard rule
// matches every name strictly below its pattern, at any depth
// ("a.b.debian.org" but not "debian.org" itself, for which a policy lists
// "debian.org" too). A qname that is not host-name syntax (escaped bytes,
// '_', empty labels) matches nothing.
bool Matches(const DomainRule& rule, std::string_view qname);

}  // namespace dsec::network::dns
