// SPDX-License-Identifier: Apache-2.0
// virtio-blk in a VM configuration: {"type": "disk", "path": "...",
// "read_only": false} (a raw image file); on the command line `--disk
// PATH[,ro]` (repeatable). The GET_ID serial is dsec-disk<index>.
#pragma once

#include <memory>
#include <string>

#include "devices/virtio/device_spec.h"

namespace dsec::devices {

struct BlkSpec final : public virtio::DeviceSpec {
  std::string path;
  bool read_only = false;

  static std::shared_ptr<const BlkSpec> Make(std::string path, bool read_only = false) {
    auto s = std::make_shared<BlkSpec>();
    s->path = std::move(path);
    s->read_only = read_only;
    return s;
  }

  const virtio::DeviceKind& kind() const override;
  nlohmann::json ToJson() const override;
  absl::StatusOr<virtio::BuiltDevice> Build(const virtio::DeviceEnv& env) const override;
};

const virtio::DeviceKind& BlkDeviceKind();

}  // namespace dsec::devices
