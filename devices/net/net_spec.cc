// SPDX-License-Identifier: Apache-2.0
#include "devices/net/net_spec.h"

#include <linux/if_tun.h>
#include <sys/ioctl.h>

#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "devices/net/mac_address.h"
#include "devices/net/net_device.h"
#include "devices/net/tap_backend.h"

namespace dsec::devices {

namespace {

// Linux interface names: 1..15 bytes (IFNAMSIZ - 1).
bool ValidTapName(const std::string& name) { return !name.empty() && name.size() <= 15; }

// A guest NIC needs a unicast address: the group bit (bit 0 of the first
// octet) clear.
bool ValidUnicastMac(const std::string& mac) {
  auto parsed = ParseMac(absl::string_view(mac.data(), mac.size()));
  return parsed.ok() && ((*parsed)[0] & 1) == 0;
}

class NetKind final : public virtio::DeviceKind {
 public:
  std::string_view name() const override { return "net"; }
  std::span<const virtio::DeviceFlag> flags() const override { return kFlags; }
  // writev (frames to the tap) is on every thread's list.
  virtio::HostCalls host_calls() const override { return {kCalls, kIoctls}; }
  absl::StatusOr<std::shared_ptr<const virtio::DeviceSpec>> FromJson(
      JsonFields& f) const override {
    auto spec = std::make_shared<NetSpec>();
    // 0-2 are the monitor's stdio.
    DSEC_ASSIGN_OR_RETURN(std::optional<uint64_t> fd, f.OptUint("tap_fd", 3, kMaxFd));
    DSEC_ASSIGN_OR_RETURN(std::optional<std::string> tap, f.OptString("tap", 64));
    if (fd.has_value() == tap.has_value()) {
      return InvalidField(f.Path("tap"), f.Path("tap") + " or " + f.Path("tap_fd") + ": exactly one is required");
    }
    if (fd) {
      spec->tap_fd = static_cast<int>(*fd);
    } else {
      spec->tap = *tap;
      if (!ValidTapName(spec->tap)) {
        return InvalidField(f.Path("tap"), f.Path("tap") + " must be 1-15 characters");
      }
    }
    DSEC_ASSIGN_OR_RETURN(auto mac, f.OptString("mac", 64));
    if (mac) {
      if (!ValidUnicastMac(*mac)) {
        return InvalidField(f.Path("mac"), f.Path("mac") + " must be a unicast xx:xx:xx:xx:xx:xx");
      }
      spec->mac = *mac;
    }
    return spec;
  }
  absl::StatusOr<virtio::DeviceSpecs> FromFlags(const virtio::DeviceFlagValues& values) const override {
    virtio::DeviceSpecs out;
    for (const char* flag : {"net", "net-fd"}) {
      auto it = values.find(flag);
      if (it == values.end()) continue;
      const bool by_fd = std::string_view(flag) == "net-fd";
      for (const std::string& arg : it->second) {
        std::vector<std::string> parts = absl::StrSplit(arg, ',');
        auto spec = std::make_shared<NetSpec>();
        if (by_fd) {
          int fd = -1;
          if (!absl::SimpleAtoi(parts[0], &fd) || fd < 3 || static_cast<uint64_t>(fd) > kMaxFd) {
            return absl::InvalidArgumentError(
                absl::StrCat("--net-fd ", arg, ": FD must be a descriptor number of 3 or more"));
          }
          spec->tap_fd = fd;
        } else {
          spec->tap = parts[0];
          if (!ValidTapName(spec->tap)) {
            return absl::InvalidArgumentError(
                absl::StrCat("--net ", arg, ": tap name must be 1-15 characters"));
          }
        }
        for (size_t i = 1; i < parts.size(); ++i) {
          if (parts[i].rfind("mac=", 0) == 0 && ValidUnicastMac(parts[i].substr(4))) {
            spec->mac = parts[i].substr(4);
          } else {
            return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", arg, ": bad option '", parts[i],
                                                           "' (expected mac=xx:xx:xx:xx:xx:xx, unicast)"));
          }
        }
        out.push_back(std::move(spec));
      }
    }
    return out;
  }

 private:
  static constexpr uint64_t kMaxFd = 1 << 20;
  static constexpr virtio::DeviceFlag kFlags[] = {
      {"net", "TAP[,mac=..]", "virtio-net on an existing tap (repeatable)", true},
      {"net-fd", "FD[,mac=..]", "virtio-net on an inherited tap descriptor (repeatable)", true}};
  static constexpr virtio::SyscallUse kCalls[] = {
      {virtio::HostThread::kEventLoop, "readv", "frames from the tap"}};
  static constexpr virtio::IoctlUse kIoctls[] = {
      {virtio::HostThread::kEventLoop, TUNSETOFFLOAD,
       "the tap's offloads, as the guest negotiated them (device activation)"}};
};

}  // namespace

const virtio::DeviceKind& NetDeviceKind() {
  static const NetKind kind;
  return kind;
}

const virtio::DeviceKind& NetSpec::kind() const { return NetDeviceKind(); }

nlohmann::json NetSpec::ToJson() const {
  nlohmann::json j = {{"type", "net"}};
  if (tap_fd >= 0) {
    j["tap_fd"] = tap_fd;
  } else {
    j["tap"] = tap;
  }
  if (!mac.empty()) j["mac"] = mac;
  return j;
}

absl::StatusOr<virtio::BuiltDevice> NetSpec::Build(const virtio::DeviceEnv& env) const {
  absl::StatusOr<std::unique_ptr<TapBackend>> backend =
      tap_fd >= 0 ? TapBackend::Adopt(ScopedFd(tap_fd)) : TapBackend::Open(absl::string_view(tap.data(), tap.size()));
  if (!backend.ok()) {
    return Annotate(backend.status(), tap_fd >= 0 ? absl::StrCat("net tap_fd ", tap_fd) : absl::StrCat("net ", tap));
  }
  NetDeviceConfig c;
  c.id = (*backend)->name();
  if (!mac.empty()) {
    DSEC_ASSIGN_OR_RETURN(c.mac, ParseMac(absl::string_view(mac.data(), mac.size())));
  } else {
    c.mac = DeriveMac(std::hash<std::string>{}(c.id));
  }
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<NetDevice> dev, NetDevice::Create(c, std::move(*backend)));
  virtio::BuiltDevice b;
  b.name = absl::StrCat("virtio-net", env.index);
  b.device = std::move(dev);
  return b;
}

}  // namespace dsec::devices
