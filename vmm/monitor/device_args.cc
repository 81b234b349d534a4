// SPDX-License-Identifier: Apache-2.0
#include "vmm/monitor/device_args.h"

#include <cctype>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dsec::monitor {

namespace {

std::vector<std::string> SplitComma(const std::string& arg) {
  return absl::StrSplit(arg, ',');
}

bool ValidMac(const std::string& mac) {
  if (mac.size() != 17) return false;
  for (size_t i = 0; i < mac.size(); ++i) {
    if (i % 3 == 2) {
      if (mac[i] != ':') return false;
    } else if (!std::isxdigit(static_cast<unsigned char>(mac[i]))) {
      return false;
    }
  }
  // A guest NIC needs a unicast address: the group bit (bit 0 of the first
  // octet) must be clear.
  return (std::strtoul(mac.substr(0, 2).c_str(), nullptr, 16) & 1) == 0;
}

}  // namespace

absl::StatusOr<vm::DiskConfig> ParseDiskArg(const std::string& arg) {
  auto parts = SplitComma(arg);
  vm::DiskConfig disk;
  disk.path = parts[0];
  if (disk.path.empty()) return absl::InvalidArgumentError("--disk: empty path");
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i] == "ro") {
      disk.read_only = true;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--disk ", arg, ": unknown option '", parts[i], "' (expected ro)"));
    }
  }
  return disk;
}

absl::StatusOr<vm::NetConfig> ParseNetArg(const std::string& arg) {
  auto parts = SplitComma(arg);
  vm::NetConfig net;
  net.tap = parts[0];
  if (net.tap.empty() || net.tap.size() > 15) {
    return absl::InvalidArgumentError(
        absl::StrCat("--net ", arg, ": tap name must be 1-15 characters"));
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].rfind("mac=", 0) == 0 && ValidMac(parts[i].substr(4))) {
      net.mac = parts[i].substr(4);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--net ", arg, ": bad option '", parts[i], "' (expected mac=xx:xx:xx:xx:xx:xx, unicast)"));
    }
  }
  return net;
}

absl::StatusOr<vm::VsockConfig> ParseVsockArg(const std::string& arg) {
  auto parts = SplitComma(arg);
  if (parts.size() != 2 || parts[1].empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--vsock ", arg, ": expected CID,SOCKET"));
  }
  char* end = nullptr;
  unsigned long cid = std::strtoul(parts[0].c_str(), &end, 10);
  // CIDs 0-2 are reserved (hypervisor, local, host); 0xffffffff is "any".
  if (parts[0].empty() || *end != '\0' || cid < 3 || cid >= 0xffffffffUL) {
    return absl::InvalidArgumentError(
        absl::StrCat("--vsock ", arg, ": guest CID must be a number from 3 to 4294967294"));
  }
  vm::VsockConfig v;
  v.guest_cid = static_cast<uint32_t>(cid);
  v.socket_path = parts[1];
  return v;
}

}  // namespace dsec::monitor
