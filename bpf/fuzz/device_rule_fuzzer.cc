// SPDX-License-Identifier: Apache-2.0
// ParseDeviceRule on any bytes: never crashes; a rule it accepts has a
// non-empty access set and numbers in range, and formats to text it parses
// back to the same rule.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "bpf/device_rule.h"

namespace {

bool InRange(uint32_t n, uint32_t max) { return n == dsec::bpf::kAnyDeviceNumber || n <= max; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto rule = dsec::bpf::ParseDeviceRule(text);
  if (!rule.ok()) return 0;
  if (rule->access == 0 || (rule->access & ~7u) != 0) std::abort();
  if (!InRange(rule->major, dsec::bpf::kMaxDeviceMajor) ||
      !InRange(rule->minor, dsec::bpf::kMaxDeviceMinor)) {
    std::abort();
  }
  auto again = dsec::bpf::ParseDeviceRule(dsec::bpf::FormatDeviceRule(*rule));
  if (!again.ok() || !(*again == *rule)) std::abort();
  return 0;
}
