// SPDX-License-Identifier: Apache-2.0
// virtio-vsock in a VM configuration: {"type": "vsock", "guest_cid": 3,
// "socket": "/run/vm.vsock"} (the host side is a unix socket, README.md);
// on the command line `--vsock CID,SOCKET`. At most one per VM.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "devices/virtio/device_spec.h"

namespace dsec::devices {

struct VsockSpec final : public virtio::DeviceSpec {
  uint32_t guest_cid = 3;
  std::string socket_path;

  static std::shared_ptr<const VsockSpec> Make(uint32_t guest_cid, std::string socket_path) {
    auto s = std::make_shared<VsockSpec>();
    s->guest_cid = guest_cid;
    s->socket_path = std::move(socket_path);
    return s;
  }

  const virtio::DeviceKind& kind() const override;
  nlohmann::json ToJson() const override;
  absl::StatusOr<virtio::BuiltDevice> Build(const virtio::DeviceEnv& env) const override;
};

const virtio::DeviceKind& VsockDeviceKind();

}  // namespace dsec::devices
