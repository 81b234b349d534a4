// SPDX-License-Identifier: Apache-2.0
// The device kinds a VM configuration may name: one line per device folder
// in device_table.cc. Adding a virtio device touches its folder and that
// line; the monitor's flags, the JSON config and the VM's wiring all come
// from this table.
#pragma once

#include <span>
#include <string_view>

#include "devices/virtio/device_spec.h"

namespace dsec::vm {

// In the order the monitor's command-line flags list them.
std::span<const virtio::DeviceKind* const> DeviceKinds();

// The kind named `name` ("disk", "pmem", ...), or nullptr.
const virtio::DeviceKind* FindDeviceKind(std::string_view name);

}  // namespace dsec::vm
