// SPDX-License-Identifier: Apache-2.0
// ParseEgressRule on any bytes: never crashes; a rule it accepts formats to
// text it parses back to the same rule, and encodes to a key of the right size.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "bpf/egress_rule.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto rule = dsec::bpf::ParseEgressRule(text);
  if (!rule.ok()) return 0;
  auto again = dsec::bpf::ParseEgressRule(dsec::bpf::FormatEgressRule(*rule));
  if (!again.ok() || !(*again == *rule)) std::abort();
  if (dsec::bpf::EgressRuleKey(*rule).size() != (rule->ipv6 ? 22u : 10u)) std::abort();
  return 0;
}
