// SPDX-License-Identifier: Apache-2.0
#include "platform/kvm/kvm_ioctl_numbers.h"

#include <linux/kvm.h>

#include "platform/kvm/kvm_abi.h"

namespace dsec::kvm {

namespace {

constexpr unsigned long kVcpuRun[] = {
    KVM_RUN,          KVM_GET_REGS,        KVM_SET_REGS,   KVM_GET_SREGS,     KVM_SET_SREGS,
    KVM_GET_MP_STATE, KVM_SET_MP_STATE,    KVM_GET_VCPU_EVENTS, KVM_SET_VCPU_EVENTS,
    KVM_GET_LAPIC,    KVM_SET_LAPIC,       KVM_IRQ_LINE,   KVM_SIGNAL_MSI,    KVM_IRQFD,
    KVM_IOEVENTFD,    KVM_SET_GSI_ROUTING,
};
constexpr unsigned long kInterrupt[] = {
    KVM_IRQ_LINE, KVM_SIGNAL_MSI, KVM_IRQFD, KVM_IOEVENTFD, KVM_SET_GSI_ROUTING,
};
constexpr unsigned long kTeardown[] = {
    KVM_GET_REGS, KVM_GET_SREGS, KVM_IRQFD, KVM_IOEVENTFD, KVM_SET_USER_MEMORY_REGION,
    KVM_GET_DIRTY_LOG,
};

constexpr unsigned long kSnapshot[] = {
    KVM_GET_REGS,      KVM_GET_SREGS,       KVM_GET_FPU,      KVM_GET_XSAVE,   KVM_GET_XSAVE2,
    KVM_GET_XCRS,      KVM_GET_DEBUGREGS,   abi::kGetMsrs,    KVM_GET_LAPIC,
    KVM_GET_VCPU_EVENTS, KVM_GET_MP_STATE,  abi::kGetCpuid2,  KVM_GET_TSC_KHZ,
    KVM_GET_IRQCHIP,   KVM_GET_CLOCK,
};

constexpr unsigned long kPause[] = {KVM_GET_CLOCK, KVM_SET_CLOCK};

}  // namespace

std::span<const unsigned long> VcpuRunIoctls() { return kVcpuRun; }
std::span<const unsigned long> InterruptIoctls() { return kInterrupt; }
std::span<const unsigned long> TeardownIoctls() { return kTeardown; }
std::span<const unsigned long> SnapshotIoctls() { return kSnapshot; }
std::span<const unsigned long> PauseIoctls() { return kPause; }

}  // namespace dsec::kvm
