// SPDX-License-Identifier: Apache-2.0
// What the reclaim controller needs of one microVM.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "devices/balloon/balloon_control.h"

namespace dsec::balloon {

// A host virtual range [addr, addr + size) in the controller's process.
struct HostRange {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t end() const { return addr + size; }
};

// One VM as the controller sees it. Implemented by the VM wiring (an adapter
// over vm::Vm: its BalloonDevice, its MemfdGuestMemory mappings, its RSS)
// and by fakes in tests.
//
// Threads: called from the controller's thread only; the implementation
// must stay valid until ReclaimController::Unregister returns.
class ReclaimVm {
 public:
  virtual ~ReclaimVm() = default;

  // For logs and metrics ("vm=<name>").
  virtual std::string name() const = 0;
  // The process whose address space holds guest_ram() (DAMON's vaddr target).
  virtual pid_t pid() const = 0;
  // The balloon device, or nullptr if the VM has none.
  virtual devices::BalloonControl* balloon() = 0;
  // Guest RAM as host mappings in this process: MAP_SHARED memfd mappings
  // (the user-space estimator unmaps sampled pages, which only keeps their
  // content on a shared file mapping), page-aligned.
  virtual std::vector<HostRange> guest_ram() const = 0;
  // Host memory the VM uses now (guest RAM resident in the host).
  virtual absl::StatusOr<uint64_t> ResidentBytes() = 0;
};

}  // namespace dsec::balloon
