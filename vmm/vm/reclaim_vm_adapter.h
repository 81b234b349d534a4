// SPDX-License-Identifier: Apache-2.0
// The reclaim controller's view (balloon::ReclaimVm) of a vm::Vm running in
// this process: its virtio-balloon device, its memfd guest RAM mappings and
// their residency. It lives here, above both, so that balloon/ does not
// depend on the monitor (ARCHITECTURE.md: dependencies point downward).
#pragma once

#include <string>
#include <vector>

#include "balloon/reclaim_vm.h"
#include "vmm/vm/vm.h"

namespace dsec::vm {

// Threads: the controller's thread calls it; the Vm must outlive the
// adapter's registration (unregister before the Vm is destroyed, and stop
// the controller's thread before Vm::Wait() stops the device event loop).
class VmReclaimAdapter : public balloon::ReclaimVm {
 public:
  VmReclaimAdapter(const Vm* vm, std::string name) : vm_(vm), name_(std::move(name)) {}

  std::string name() const override { return name_; }
  // The monitor is this process: guest RAM is mapped here.
  pid_t pid() const override;
  // The device that offers a BalloonControl, if any (found by type).
  devices::BalloonControl* balloon() override;
  std::vector<balloon::HostRange> guest_ram() const override;
  // Guest RAM pages resident in the host (mincore over the memfd mappings:
  // counts pages that are in memory but currently unmapped, which VmRSS
  // would miss).
  absl::StatusOr<uint64_t> ResidentBytes() override;

 private:
  const Vm* const vm_;
  const std::string name_;
};

}  // namespace dsec::vm
