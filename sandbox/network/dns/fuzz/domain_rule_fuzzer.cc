// SPDX-License-Identifier: Apache-2.0
// ParseDomainRule and Matches on any bytes: never crash; a rule that parses
// formats to text that parses back to the same rule, and a plain rule
// matches its own name (a wildcard rule never matches its own pattern).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "sandbox/network/dns/domain_rule.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using dsec::network::dns::DomainRule;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto rule = dsec::network::dns::ParseDomainRule(text);
  // The input as a query name, against a fixed wildcard rule.
  const DomainRule fixed{.pattern = "debian.org", .wildcard = true, .port = 0};
  (void)dsec::network::dns::Matches(fixed, text);
  if (!rule.ok()) return 0;
  auto again = dsec::network::dns::ParseDomainRule(dsec::network::dns::FormatDomainRule(*rule));
  if (!again.ok() || !(*again == *rule)) std::abort();
  if (dsec::network::dns::Matches(*rule, rule->pattern) == rule->wildcard) std::abort();
  if (rule->wildcard && !dsec::network::dns::Matches(*rule, "a." + rule->pattern + "."))
    std::abort();
  return 0;
}
