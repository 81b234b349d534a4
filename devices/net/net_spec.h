// SPDX-License-Identifier: Apache-2.0
// virtio-net in a VM configuration: {"type": "net", "tap": "tap0", "mac":
// "02:..."} (an existing tap in the monitor's network namespace; mac
// optional, derived from the tap name otherwise); on the command line
// `--net TAP[,mac=xx:xx:xx:xx:xx:xx]` (repeatable). Or a tap the monitor
// inherited as a descriptor from the runtime that made it (which may live
// in another network namespace: a jailed monitor's is empty):
// {"type": "net", "tap_fd": 3, "mac": ...}, `--net-fd FD[,mac=..]`.
#pragma once

#include <memory>
#include <string>

#include "devices/virtio/device_spec.h"

namespace dsec::devices {

struct NetSpec final : public virtio::DeviceSpec {
  std::string tap;   // or
  int tap_fd = -1;   // >= 3, an inherited descriptor (Build takes it over)
  std::string mac;   // "" = derived from the tap name

  static std::shared_ptr<const NetSpec> Make(std::string tap, std::string mac = "") {
    auto s = std::make_shared<NetSpec>();
    s->tap = std::move(tap);
    s->mac = std::move(mac);
    return s;
  }
  static std::shared_ptr<const NetSpec> FromFd(int tap_fd, std::string mac = "") {
    auto s = std::make_shared<NetSpec>();
    s->tap_fd = tap_fd;
    s->mac = std::move(mac);
    return s;
  }

  const virtio::DeviceKind& kind() const override;
  nlohmann::json ToJson() const override;
  absl::StatusOr<virtio::BuiltDevice> Build(const virtio::DeviceEnv& env) const override;
};

const virtio::DeviceKind& NetDeviceKind();

}  // namespace dsec::devices
