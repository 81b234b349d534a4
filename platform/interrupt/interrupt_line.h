// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "absl/status/status.h"

namespace dsec::devices {

// One interrupt input of the VM's interrupt controller as seen by a device.
// Edge semantics: Trigger() delivers one pulse (assert then deassert), which
// is what an ISA IRQ routed through an irqfd looks like to the guest.
//
// Threads: any thread (vCPU or event loop) may call Trigger(); it must not
// block (the irqfd implementation is one eventfd write).
class InterruptLine {
 public:
  virtual ~InterruptLine() = default;
  virtual absl::Status Trigger() = 0;
};

}  // namespace dsec::devices
