// SPDX-License-Identifier: Apache-2.0
// The KVM ioctl numbers code outside platform/kvm needs without
// <linux/kvm.h>: the monitor's seccomp filters (vmm/jail) allow, per thread
// kind, only the KVM requests that thread issues once the guest runs.
// kvm_vcpu.cc checks the constants against the kernel header.
#pragma once

#include <linux/ioctl.h>

#include <span>

namespace dsec::kvm {

inline constexpr unsigned kIoctlType = 0xAE;                    // KVMIO
inline constexpr unsigned long kIoctlRun = _IO(kIoctlType, 0x80);  // KVM_RUN

// What a vCPU thread issues while the guest runs: KVM_RUN, its own register,
// MP, event and LAPIC state (INIT/SIPI, reset), interrupt injection from the
// device models it runs (IRQ line, MSI, irqfd/ioeventfd wiring, GSI routing).
std::span<const unsigned long> VcpuRunIoctls();
// Interrupt injection and its wiring from device back-ends (the event loop):
// KVM_IRQ_LINE, KVM_SIGNAL_MSI, KVM_IRQFD, KVM_IOEVENTFD, KVM_SET_GSI_ROUTING.
std::span<const unsigned long> InterruptIoctls();
// What tearing a VM down and reporting on it issues once its vCPUs stopped:
// KVM_GET_REGS/SREGS (where each vCPU was), unwiring irqfds and ioeventfds,
// deleting memslots, KVM_GET_DIRTY_LOG (final statistics).
std::span<const unsigned long> TeardownIoctls();
// What saving a paused VM's state issues (a snapshot, vmm/vm): the KVM_GET_*
// of every vCPU's registers, FPU/XSAVE/XCRS, debug registers, MSRs, LAPIC,
// events, MP state, CPUID and TSC frequency, and the VM's irqchip and clock.
// The control thread's pause and resume: the guest's kvmclock read at the
// pause and put back at the resume (vm/Vm::Pause).
std::span<const unsigned long> PauseIoctls();
std::span<const unsigned long> SnapshotIoctls();

}  // namespace dsec::kvm
