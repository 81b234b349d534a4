// SPDX-License-Identifier: Apache-2.0
// One call that prepares a guest for direct kernel boot: validates the
// kernel, initrd and command line against the guest's memory, writes them
// and the boot tables (zero page or PVH start info, GDT, page tables, MP
// table) into guest memory, and returns the boot vCPU's initial state.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "platform/arch/x86_64/e820.h"
#include "platform/arch/x86_64/kernel_loader.h"
#include "platform/arch/x86_64/layout.h"
#include "platform/kvm/x86_types.h"
#include "platform/memory/guest_memory.h"

namespace dsec::arch {

enum class BootProtocol {
  kAuto,     // linux64 when the image has a 64-bit entry, else PVH
  kLinux64,  // Linux boot protocol, 64-bit entry with a zero page
  kPvh,      // Xen PVH entry in 32-bit protected mode with hvm_start_info
};
const char* BootProtocolName(BootProtocol protocol);
// Parses "auto", "linux64" or "pvh" (InvalidArgument otherwise).
absl::StatusOr<BootProtocol> ParseBootProtocol(std::string_view name);

struct BootConfig {
  std::span<const uint8_t> kernel;
  std::optional<std::span<const uint8_t>> initrd;
  std::string cmdline;
  uint32_t vcpu_count = 1;
  BootProtocol protocol = BootProtocol::kAuto;
  // ACPI tables (acpi.h) beside the MP table: how a Linux guest powers off.
  bool acpi = true;
};

struct BootPlan {
  BootProtocol protocol = BootProtocol::kLinux64;  // never kAuto
  KernelFormat kernel_format = KernelFormat::kElf64;
  // State of the boot vCPU (vCPU 0); application processors start through
  // INIT/SIPI from the guest.
  kvm::Registers regs;
  kvm::SpecialRegisters sregs;
  kvm::FpuState fpu;
  // To be filtered against KVM_GET_MSR_INDEX_LIST before KVM_SET_MSRS.
  std::vector<kvm::MsrEntry> msrs;
  uint64_t entry = 0;
  AddressRange kernel;  // footprint, including bss / init_size
  std::optional<AddressRange> initrd;
  AddressRange cmdline;  // including the NUL
  std::vector<E820Entry> e820;
};

// Validates everything first and writes guest memory only when all of it is
// valid. InvalidArgument for any bad input (image, initrd, cmdline, vCPU
// count, protocol the image does not support, guest RAM not covering the
// first 1 MiB).
absl::StatusOr<BootPlan> SetupBoot(const memory::GuestMemory& mem, const BootConfig& config);

}  // namespace dsec::arch
