// SPDX-License-Identifier: Apache-2.0
// virtio-net in a VM configuration: {"type": "net", "tap": "tap0", "mac":
// "02:..."} (an existing tap in the monitor's network namespace; mac
// optional, derived from the tap name otherwise); on the command line
// `--net TAP[,mac=xx:xx:xx:xx:xx:xx]` (repeatable).
#pragma once

#include <memory>
#include <string>

#include "devices/virtio/device_spec.h"

namespace dsec::devices {

struct NetSpec final : public virtio::DeviceSpec {
  std::string tap;
  std::string mac;  // "" = derived from the tap name

  static std::shared_ptr<const NetSpec> Make(std::string tap, std::string mac = "") {
    auto s = std::make_shared<NetSpec>();
    s->tap = std::move(tap);
    s->mac = std::move(mac);
    return s;
  }

  const virtio::DeviceKind& kind() const override;
  nlohmann::json ToJson() const override;
  absl::StatusOr<virtio::BuiltDevice> Build(const virtio::DeviceEnv& env) const override;
};

const virtio::DeviceKind& NetDeviceKind();

}  // namespace dsec::devices
