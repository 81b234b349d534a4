// SPDX-License-Identifier: Apache-2.0
#include "vmm/vm/reclaim_vm_adapter.h"

#include <unistd.h>

#include "vmm/vm/virtio_devices.h"

namespace dsec::vm {

pid_t VmReclaimAdapter::pid() const { return ::getpid(); }

devices::BalloonControl* VmReclaimAdapter::balloon() {
  return vm_->virtio()->Find<devices::BalloonControl>();
}

std::vector<balloon::HostRange> VmReclaimAdapter::guest_ram() const {
  std::vector<balloon::HostRange> out;
  for (const memory::GuestRegion& r : vm_->memory().regions()) {
    out.push_back({reinterpret_cast<uint64_t>(r.host), r.size});
  }
  return out;
}

absl::StatusOr<uint64_t> VmReclaimAdapter::ResidentBytes() { return vm_->memory().ResidentBytes(); }

}  // namespace dsec::vm
