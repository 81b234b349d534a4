// SPDX-License-Identifier: Apache-2.0
#include "vmm/vm/device_table.h"

#include "devices/balloon/balloon_spec.h"
#include "devices/blk/blk_spec.h"
#include "devices/net/net_spec.h"
#include "devices/rng/rng_spec.h"
#include "devices/vsock/vsock_spec.h"
#include "pmem-dax/pmem_spec.h"

namespace dsec::vm {

std::span<const virtio::DeviceKind* const> DeviceKinds() {
  static const virtio::DeviceKind* const kKinds[] = {
      &devices::RngDeviceKind(),
      &devices::BalloonDeviceKind(),
      &devices::BlkDeviceKind(),
      &devices::NetDeviceKind(),
      &devices::VsockDeviceKind(),
      &pmem::PmemDeviceKind(),
  };
  return kKinds;
}

const virtio::DeviceKind* FindDeviceKind(std::string_view name) {
  for (const virtio::DeviceKind* k : DeviceKinds()) {
    if (k->name() == name) return k;
  }
  return nullptr;
}

}  // namespace dsec::vm
