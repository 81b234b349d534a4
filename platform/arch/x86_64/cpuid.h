// SPDX-License-Identifier: Apache-2.0
// The CPUID table a vCPU gets: KVM's supported table, adjusted to what this
// monitor emulates and to the VM's topology.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "platform/kvm/x86_types.h"

namespace dsec::arch {

inline constexpr uint32_t kCpuidHypervisorBase = 0x4000'0000;
inline constexpr uint32_t kCpuidKvmFeatures = 0x4000'0001;

// Returns the table for vCPU `vcpu_id` of `vcpu_count` (one thread per core,
// all cores in one package). InvalidArgument if vcpu_count is 0 or above
// 256, or vcpu_id >= vcpu_count. See cpuid.cc for each adjustment.
struct CpuidOptions {
  // KVM_CAP_TSC_DEADLINE_TIMER: KVM's in-kernel LAPIC emulates the
  // TSC-deadline timer mode, which KVM_GET_SUPPORTED_CPUID never reports
  // (userspace offers it, as QEMU does). With it a Linux guest skips the
  // LAPIC timer calibration against the PIT (calibrate_APIC_clock: 100 ms of
  // boot spent waiting for ten ticks of a timer the monitor emulates).
  bool tsc_deadline_timer = false;
};

absl::StatusOr<std::vector<kvm::CpuidEntry>> NormalizeCpuid(
    std::span<const kvm::CpuidEntry> supported, uint32_t vcpu_id, uint32_t vcpu_count,
    const CpuidOptions& options = {});

}  // namespace dsec::arch
