// SPDX-License-Identifier: Apache-2.0
#include "devices/virtio/virtio_device.h"

#include "absl/strings/str_cat.h"

namespace dsec::virtio {

absl::StatusOr<nlohmann::json> VirtioDevice::SaveState() const {
  return absl::FailedPreconditionError(
      absl::StrCat("the state of virtio device type ", static_cast<uint32_t>(device_type()),
                   " is not saved in snapshots yet"));
}

absl::Status VirtioDevice::RestoreState(const nlohmann::json&) {
  return absl::FailedPreconditionError(
      absl::StrCat("virtio device type ", static_cast<uint32_t>(device_type()),
                   " cannot be restored from a snapshot yet"));
}

}  // namespace dsec::virtio
