// SPDX-License-Identifier: Apache-2.0
// virtio-balloon in a VM configuration: {"type": "balloon", "target_mib": N}
// (the initial target, default 0); on the command line `--balloon
// [--balloon-target-mib N]`. Its BuiltDevice::control holds a
// std::shared_ptr<BalloonControl>: AsBalloonControl reads it back.
#pragma once

#include <cstdint>
#include <memory>

#include "devices/balloon/balloon_control.h"
#include "devices/virtio/device_spec.h"

namespace dsec::devices {

struct BalloonSpec final : public virtio::DeviceSpec {
  uint64_t target_mib = 0;

  static std::shared_ptr<const BalloonSpec> Make(uint64_t target_mib = 0) {
    auto s = std::make_shared<BalloonSpec>();
    s->target_mib = target_mib;
    return s;
  }

  const virtio::DeviceKind& kind() const override;
  nlohmann::json ToJson() const override;
  absl::StatusOr<virtio::BuiltDevice> Build(const virtio::DeviceEnv& env) const override;
};

const virtio::DeviceKind& BalloonDeviceKind();

// The balloon's control interface from a balloon BuiltDevice's `control`
// (nullptr for no control or another kind's).
inline BalloonControl* AsBalloonControl(const std::any* control) {
  if (control == nullptr) return nullptr;
  auto* p = std::any_cast<std::shared_ptr<BalloonControl>>(control);
  return p != nullptr ? p->get() : nullptr;
}

}  // namespace dsec::devices
