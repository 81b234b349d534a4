// SPDX-License-Identifier: Apache-2.0
#include "bpf/device_rule.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dsec::bpf {

namespace {

// The kernel's BPF_DEVCG_DEV_BLOCK and BPF_DEVCG_DEV_CHAR.
constexpr uint32_t kKernelBlock = 1;
constexpr uint32_t kKernelChar = 2;

absl::Status Bad(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("device rule \"",
                                                 absl::string_view(text.data(), text.size()),
                                                 "\": ", absl::string_view(why.data(), why.size())));
}

// '*' or 1..7 decimal digits no greater than `max`.
bool ParseNumber(absl::string_view s, uint32_t max, uint32_t* out) {
  if (s == "*") {
    *out = kAnyDeviceNumber;
    return true;
  }
  if (s.empty() || s.size() > 7) return false;
  uint32_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v > max) return false;
  *out = v;
  return true;
}

std::string FormatNumber(uint32_t n) { return n == kAnyDeviceNumber ? "*" : absl::StrCat(n); }

}  // namespace

absl::StatusOr<DeviceRule> ParseDeviceRule(std::string_view text) {
  if (text.size() > 64) return Bad(text.substr(0, 64), "longer than 64 characters");
  const std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(text.data(), text.size()), absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (fields.size() != 3) return Bad(text, "expected \"TYPE MAJOR:MINOR ACCESS\", e.g. \"c 1:3 rw\"");
  DeviceRule r;
  if (fields[0] == "a") {
    r.type = DeviceType::kAny;
  } else if (fields[0] == "c") {
    r.type = DeviceType::kChar;
  } else if (fields[0] == "b") {
    r.type = DeviceType::kBlock;
  } else {
    return Bad(text, "type must be a, c or b");
  }
  const size_t colon = fields[1].find(':');
  if (colon == absl::string_view::npos) return Bad(text, "expected MAJOR:MINOR");
  if (!ParseNumber(fields[1].substr(0, colon), kMaxDeviceMajor, &r.major)) {
    return Bad(text, absl::StrCat("major must be '*' or 0..", kMaxDeviceMajor));
  }
  if (!ParseNumber(fields[1].substr(colon + 1), kMaxDeviceMinor, &r.minor)) {
    return Bad(text, absl::StrCat("minor must be '*' or 0..", kMaxDeviceMinor));
  }
  for (char c : fields[2]) {
    const uint8_t bit = c == 'r' ? kDeviceRead : c == 'w' ? kDeviceWrite : c == 'm' ? kDeviceMknod : 0;
    if (bit == 0) return Bad(text, "access must be made of r, w and m");
    if (r.access & bit) return Bad(text, absl::StrCat("access names '", std::string(1, c), "' twice"));
    r.access |= bit;
  }
  return r;
}

std::string FormatDeviceRule(const DeviceRule& rule) {
  const char* type = rule.type == DeviceType::kChar ? "c" : rule.type == DeviceType::kBlock ? "b" : "a";
  std::string access;
  if (rule.access & kDeviceRead) access += 'r';
  if (rule.access & kDeviceWrite) access += 'w';
  if (rule.access & kDeviceMknod) access += 'm';
  return absl::StrCat(type, " ", FormatNumber(rule.major), ":", FormatNumber(rule.minor), " ", access);
}

DeviceKey DeviceRuleKey(const DeviceRule& rule) {
  const uint32_t type = rule.type == DeviceType::kChar    ? kKernelChar
                        : rule.type == DeviceType::kBlock ? kKernelBlock
                                                          : 0;
  return DeviceKey{type, rule.major, rule.minor};
}

std::vector<DeviceRule> DefaultSandboxDevices() {
  constexpr uint8_t kRwm = kDeviceRead | kDeviceWrite | kDeviceMknod;
  constexpr uint8_t kRw = kDeviceRead | kDeviceWrite;
  auto chr = [](uint32_t major, uint32_t minor, uint8_t access) {
    return DeviceRule{DeviceType::kChar, major, minor, access};
  };
  return {
      chr(1, 3, kRwm),                 // null
      chr(1, 5, kRwm),                 // zero
      chr(1, 7, kRwm),                 // full
      chr(1, 8, kRwm),                 // random
      chr(1, 9, kRwm),                 // urandom
      chr(5, 0, kRwm),                 // tty
      chr(5, 2, kRw),                  // ptmx (devpts's own node, /dev/ptmx links to it)
      chr(136, kAnyDeviceNumber, kRw)  // pty slaves under /dev/pts
  };
}

}  // namespace dsec::bpf
