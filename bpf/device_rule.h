// SPDX-License-Identifier: Apache-2.0
// One rule of a sandbox's device policy, in the cgroup v1 devices syntax
// ("c 1:3 rwm", "c 136:* rw", "b *:* m"): a device type, a major and minor
// number (or any), and the access it grants. Pure parsing and encoding, no
// BPF: device.bpf.c looks rules up in a hash map keyed by DeviceRuleKey.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::bpf {

enum class DeviceType : uint8_t {
  kAny,    // 'a': character and block devices
  kChar,   // 'c'
  kBlock,  // 'b'
};

// A major or minor number standing for every number ('*'). Real numbers
// are below 2^12 (major) and 2^20 (minor).
inline constexpr uint32_t kAnyDeviceNumber = 0xffffffffu;
inline constexpr uint32_t kMaxDeviceMajor = (1u << 12) - 1;
inline constexpr uint32_t kMaxDeviceMinor = (1u << 20) - 1;

// Access bits: the kernel's BPF_DEVCG_ACC_* values.
inline constexpr uint8_t kDeviceMknod = 1;  // 'm'
inline constexpr uint8_t kDeviceRead = 2;   // 'r'
inline constexpr uint8_t kDeviceWrite = 4;  // 'w'

struct DeviceRule {
  DeviceType type = DeviceType::kAny;
  uint32_t major = kAnyDeviceNumber;
  uint32_t minor = kAnyDeviceNumber;
  uint8_t access = 0;  // a non-empty set of kDevice{Mknod,Read,Write}

  bool operator==(const DeviceRule&) const = default;
};

// Parses "TYPE MAJOR:MINOR ACCESS": TYPE one of a, c, b; MAJOR and MINOR
// decimal numbers (major 0..4095, minor 0..1048575) or '*'; ACCESS a
// non-empty combination of r, w and m, each at most once. Fields are
// separated by blanks. Errors name the rule.
absl::StatusOr<DeviceRule> ParseDeviceRule(std::string_view text);

// The rule as ParseDeviceRule reads it back ("c 136:* rw").
std::string FormatDeviceRule(const DeviceRule& rule);

// The rule's key in device.bpf.c's map (struct dev_key): the type as the
// kernel's BPF_DEVCG_DEV_* (0 for any), major, minor (kAnyDeviceNumber for
// any). The value stored under it is the access mask.
struct DeviceKey {
  uint32_t type;
  uint32_t major;
  uint32_t minor;
};
DeviceKey DeviceRuleKey(const DeviceRule& rule);

// What a container sandbox's /dev holds (sandbox/container/child_process.cc
// BuildDev): null, zero, full, random, urandom and tty, which the sandbox
// creates itself (so with mknod), devpts's ptmx and its pty slaves
// (136:*, created by devpts).
std::vector<DeviceRule> DefaultSandboxDevices();

}  // namespace dsec::bpf
