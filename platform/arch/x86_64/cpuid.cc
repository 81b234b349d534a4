// SPDX-License-Identifier: Apache-2.0
// Bit positions from the Intel SDM Vol. 2A, CPUID instruction.
#include "platform/arch/x86_64/cpuid.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "absl/strings/str_format.h"

namespace dsec::arch {

namespace {

// Leaf 1 ECX features the guest must not see: MONITOR/MWAIT (not emulated,
// an idle guest would spin in mwait instead of halting), DS-CPL and PDCM (no
// debug store or perf capabilities), VMX/SMX (no nested virtualisation or
// TXT), EIST/TM2 (no thermal or frequency control).
constexpr uint32_t kLeaf1EcxClear = (1u << 3) | (1u << 4) | (1u << 5) | (1u << 6) |
                                    (1u << 7) | (1u << 8) | (1u << 15);
constexpr uint32_t kLeaf1EcxHypervisor = 1u << 31;
constexpr uint32_t kLeaf1EcxTscDeadline = 1u << 24;
// Leaf 1 EDX: DS (debug store), ACPI (thermal MSRs), TM, PBE: no thermal or
// debug-store hardware behind them.
constexpr uint32_t kLeaf1EdxClear = (1u << 21) | (1u << 22) | (1u << 29) | (1u << 31);
constexpr uint32_t kLeaf1EdxHtt = 1u << 28;

// Leaf 0xB / 0x1F level types.
constexpr uint32_t kLevelSmt = 1, kLevelCore = 2;

// Bits needed to number `n` items (x2APIC id shift width).
uint32_t WidthFor(uint32_t n) { return n <= 1 ? 0 : std::bit_width(n - 1); }

void FillTopologyLeaf(kvm::CpuidEntry& e, uint32_t vcpu_id, uint32_t vcpu_count) {
  // One thread per core: the SMT level has one logical processor and a
  // zero shift; the core level holds all vCPUs. Further subleaves are
  // invalid (type 0) but still report the x2APIC id in EDX.
  switch (e.index) {
    case 0:
      e.eax = 0;
      e.ebx = 1;
      e.ecx = (kLevelSmt << 8) | e.index;
      break;
    case 1:
      e.eax = WidthFor(vcpu_count);
      e.ebx = vcpu_count;
      e.ecx = (kLevelCore << 8) | e.index;
      break;
    default:
      e.eax = 0;
      e.ebx = 0;
      e.ecx = e.index;
      break;
  }
  e.edx = vcpu_id;
}

// KVM paravirt signature "KVMKVMKVM\0\0\0"; the max hypervisor leaf is
// 0x40000001 only when KVM offers its feature leaf.
kvm::CpuidEntry HypervisorBaseLeaf(bool has_kvm_features) {
  kvm::CpuidEntry e;
  e.function = kCpuidHypervisorBase;
  e.eax = has_kvm_features ? kCpuidKvmFeatures : kCpuidHypervisorBase;
  std::memcpy(&e.ebx, "KVMK", 4);
  std::memcpy(&e.ecx, "VMKV", 4);
  std::memcpy(&e.edx, "M\0\0\0", 4);
  return e;
}

}  // namespace

absl::StatusOr<std::vector<kvm::CpuidEntry>> NormalizeCpuid(
    std::span<const kvm::CpuidEntry> supported, uint32_t vcpu_id, uint32_t vcpu_count,
    const CpuidOptions& options) {
  if (vcpu_count == 0 || vcpu_count > 256 || vcpu_id >= vcpu_count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vCPU %d of %d is not a valid topology", vcpu_id, vcpu_count));
  }
  bool has_kvm_features = false;
  for (const auto& e : supported) has_kvm_features |= e.function == kCpuidKvmFeatures;

  std::vector<kvm::CpuidEntry> out;
  bool have_hv_base = false;
  for (kvm::CpuidEntry e : supported) {
    switch (e.function) {
      case 0x1:
        // EBX[31:24] initial APIC id; EBX[23:16] logical processors per
        // package (meaningful with HTT, which we set for SMP guests).
        e.ebx = (e.ebx & 0x0000'FFFF) | (vcpu_id << 24) | (std::min<uint32_t>(vcpu_count, 255) << 16);
        e.ecx = (e.ecx & ~kLeaf1EcxClear) | kLeaf1EcxHypervisor;
        if (options.tsc_deadline_timer) {
          e.ecx |= kLeaf1EcxTscDeadline;
        } else {
          e.ecx &= ~kLeaf1EcxTscDeadline;
        }
        e.edx &= ~kLeaf1EdxClear;
        if (vcpu_count > 1) {
          e.edx |= kLeaf1EdxHtt;
        } else {
          e.edx &= ~kLeaf1EdxHtt;
        }
        break;
      case 0x4: {
        // Deterministic cache parameters: EAX[31:26] cores per package - 1;
        // EAX[25:14] threads sharing the cache - 1. L1/L2 are per core (one
        // thread each); L3 and beyond are shared by the whole package.
        uint32_t level = (e.eax >> 5) & 0x7;
        uint32_t sharing = level >= 3 ? vcpu_count - 1 : 0;
        uint32_t cores = std::min<uint32_t>(vcpu_count, 64) - 1;
        e.eax = (e.eax & 0x3FFF) | ((sharing & 0xFFF) << 14) | (cores << 26);
        break;
      }
      case 0x6:
        // Thermal and power management: nothing behind it in a VM.
      case 0xA:
        // Architectural PMU: no performance counters are exposed.
        e.eax = e.ebx = e.ecx = e.edx = 0;
        break;
      case 0xB:
      case 0x1F:
        FillTopologyLeaf(e, vcpu_id, vcpu_count);
        break;
      case kCpuidHypervisorBase:
        e = HypervisorBaseLeaf(has_kvm_features);
        have_hv_base = true;
        break;
      case kCpuidKvmFeatures:
        break;  // kept as KVM reports it
      default:
        // Other hypervisor leaves (e.g. 0x40000100+ for Hyper-V emulation)
        // describe interfaces this monitor does not configure.
        if (e.function > kCpuidKvmFeatures && e.function < 0x5000'0000) continue;
        break;
    }
    out.push_back(e);
  }
  // Guests detect KVM (kvmclock, PV EOI) by this leaf; add it even if
  // KVM's table lacked it.
  if (!have_hv_base) out.push_back(HypervisorBaseLeaf(has_kvm_features));
  return out;
}

}  // namespace dsec::arch
