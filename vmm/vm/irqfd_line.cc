// SPDX-License-Identifier: Apache-2.0
#include "vmm/vm/irqfd_line.h"

#include <sys/eventfd.h>

#include "base/status.h"

namespace dsec::vm {

absl::StatusOr<std::unique_ptr<IrqfdLine>> IrqfdLine::Create(kvm::KvmVm& vm, uint32_t gsi) {
  DSEC_ASSIGN_OR_RETURN(EventFd event, EventFd::Create(EFD_NONBLOCK));
  DSEC_ASSIGN_OR_RETURN(kvm::IrqfdRegistration reg, vm.RegisterIrqfd(event, gsi));
  return std::unique_ptr<IrqfdLine>(new IrqfdLine(std::move(event), std::move(reg)));
}

}  // namespace dsec::vm
