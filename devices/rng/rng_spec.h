// SPDX-License-Identifier: Apache-2.0
// virtio-rng in a VM configuration: {"type": "rng", "rate_bytes_per_s": N,
// "burst_bytes": N} (both optional, 0 = unlimited / one second's worth);
// on the command line `--rng`. No control object.
#pragma once

#include <cstdint>
#include <memory>

#include "devices/virtio/device_spec.h"

namespace dsec::devices {

struct RngSpec final : public virtio::DeviceSpec {
  uint64_t rate_bytes_per_sec = 0;
  uint64_t burst_bytes = 0;

  static std::shared_ptr<const RngSpec> Make() { return std::make_shared<RngSpec>(); }

  const virtio::DeviceKind& kind() const override;
  nlohmann::json ToJson() const override;
  absl::StatusOr<virtio::BuiltDevice> Build(const virtio::DeviceEnv& env) const override;
};

const virtio::DeviceKind& RngDeviceKind();

}  // namespace dsec::devices
