// SPDX-License-Identifier: Apache-2.0
// The KVM ioctl numbers code outside platform/kvm needs without
// <linux/kvm.h>: the monitor's seccomp filters (vmm/jail) allow KVM_RUN on
// vCPU threads and KVM's ioctl type at teardown. kvm_vcpu.cc checks them
// against the kernel header.
#pragma once

#include <linux/ioctl.h>

namespace dsec::kvm {

inline constexpr unsigned kIoctlType = 0xAE;                    // KVMIO
inline constexpr unsigned long kIoctlRun = _IO(kIoctlType, 0x80);  // KVM_RUN

}  // namespace dsec::kvm
