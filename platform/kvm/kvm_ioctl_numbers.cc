// SPDX-License-Identifier: Apache-2.0
#include "platform/kvm/kvm_ioctl_numbers.h"

#include <linux/kvm.h>

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

}  // namespace

std::span<const unsigned long> VcpuRunIoctls() { return kVcpuRun; }
std::span<const unsigned long> InterruptIoctls() { return kInterrupt; }
std::span<const unsigned long> TeardownIoctls() { return kTeardown; }

}  // namespace dsec::kvm
