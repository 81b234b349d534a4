// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "platform/interrupt/interrupt_line.h"
#include "base/eventfd.h"
#include "platform/kvm/kvm_vm.h"

namespace dsec::vm {

// An interrupt line into the in-kernel irqchip through an irqfd: raising it
// from any thread is one eventfd write, never a trip through KVM_RUN. The
// KvmVm must outlive it.
class IrqfdLine : public devices::InterruptLine {
 public:
  static absl::StatusOr<std::unique_ptr<IrqfdLine>> Create(kvm::KvmVm& vm, uint32_t gsi);
  absl::Status Trigger() override { return event_.Signal(); }
  uint32_t gsi() const { return registration_.gsi(); }

 private:
  IrqfdLine(EventFd event, kvm::IrqfdRegistration registration)
      : event_(std::move(event)), registration_(std::move(registration)) {}
  EventFd event_;
  kvm::IrqfdRegistration registration_;
};

}  // namespace dsec::vm
