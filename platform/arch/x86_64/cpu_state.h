// SPDX-License-Identifier: Apache-2.0
// Boot CPU state for the two entry protocols, and the guest-memory tables it
// points at (boot GDT + TSS, identity page tables). Pure data: the vCPU code
// in vmm/vcpu hands these structs to KVM.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "platform/kvm/x86_types.h"
#include "platform/memory/guest_memory.h"

namespace dsec::arch {

// Boot protocol, "64-bit BOOT PROTOCOL": __BOOT_CS is 0x10 and __BOOT_DS is
// 0x18 with flat 4 GiB segments. The TSS exists only because KVM (VMX guest
// state checks) needs a usable TR.
inline constexpr uint16_t kBootCodeSelector = 0x10;
inline constexpr uint16_t kBootDataSelector = 0x18;
inline constexpr uint16_t kBootTssSelector = 0x20;
inline constexpr size_t kBootGdtEntries = 6;  // null, null, code, data, TSS (16 bytes)
inline constexpr uint32_t kBootTssLimit = 0x67;  // 104-byte TSS, no I/O bitmap

// Control registers and EFER (Intel SDM Vol. 3A, 2.5 and 2.2.1).
inline constexpr uint64_t kCr0Pe = 1u << 0, kCr0Mp = 1u << 1, kCr0Et = 1u << 4,
                          kCr0Ne = 1u << 5, kCr0Wp = 1u << 16, kCr0Am = 1u << 18,
                          kCr0Pg = 1u << 31;
inline constexpr uint64_t kCr4Pae = 1u << 5;
inline constexpr uint64_t kEferSce = 1u << 0, kEferLme = 1u << 8, kEferLma = 1u << 10,
                          kEferNxe = 1u << 11;
inline constexpr uint64_t kLongModeCr0 =
    kCr0Pe | kCr0Mp | kCr0Et | kCr0Ne | kCr0Wp | kCr0Am | kCr0Pg;  // 0x80050033
inline constexpr uint64_t kLongModeEfer = kEferSce | kEferLme | kEferLma | kEferNxe;  // 0xd01
// IA32_APIC_BASE of the bootstrap processor: default base, BSP (bit 8),
// global enable (bit 11). KVM_SET_SREGS applies this field, so leaving it 0
// would disable the LAPIC.
inline constexpr uint64_t kBspApicBase = 0xFEE0'0000 | (1u << 8) | (1u << 11);

// MSR indices (Intel SDM Vol. 4).
inline constexpr uint32_t kMsrIa32SysenterCs = 0x174;
inline constexpr uint32_t kMsrIa32SysenterEsp = 0x175;
inline constexpr uint32_t kMsrIa32SysenterEip = 0x176;
inline constexpr uint32_t kMsrIa32MiscEnable = 0x1a0;
inline constexpr uint32_t kMsrMtrrDefType = 0x2ff;
inline constexpr uint32_t kMsrStar = 0xc000'0081;
inline constexpr uint32_t kMsrLstar = 0xc000'0082;
inline constexpr uint32_t kMsrCstar = 0xc000'0083;
inline constexpr uint32_t kMsrSyscallMask = 0xc000'0084;
inline constexpr uint32_t kMsrKernelGsBase = 0xc000'0102;
inline constexpr uint64_t kMiscEnableFastString = 1u << 0;
inline constexpr uint64_t kMtrrDefTypeWbEnabled = 0x806;  // E (bit 11) | type 6 (WB)

enum class CpuMode { kLong64, kProtected32 };

// A segment descriptor (SDM Vol. 3A, 3.4.5). `flags` holds the access byte
// in bits 0-7 and G/DB/L/AVL in bits 15/14/13/12.
uint64_t GdtEntry(uint16_t flags, uint32_t base, uint32_t limit);
// The hidden part of a segment register as loaded from `entry`.
kvm::Segment SegmentFromGdtEntry(uint64_t entry, uint16_t selector);
// The boot GDT for a mode: 64-bit code for kLong64, 32-bit code for PVH.
std::array<uint64_t, kBootGdtEntries> BootGdt(CpuMode mode);

// Writes the boot GDT at kBootGdtAddr and a zeroed TSS at kBootTssAddr.
absl::Status WriteBootGdt(const memory::GuestMemory& mem, CpuMode mode);
// Writes PML4/PDPT/4 PDs identity-mapping [0, 4 GiB) with 2 MiB pages. The
// U bit is set so a minimal guest may run CPL3 code on this map; Linux
// replaces it early in startup_64.
absl::Status WriteIdentityPageTables(const memory::GuestMemory& mem);

// 64-bit mode with paging on the identity map (boot protocol, 64-bit entry).
kvm::SpecialRegisters LongModeSregs();
kvm::Registers Linux64Registers(uint64_t entry, uint64_t zero_page);
// 32-bit protected mode, paging off, flat segments (PVH boot ABI).
kvm::SpecialRegisters ProtectedModeSregs();
kvm::Registers PvhRegisters(uint32_t entry, uint32_t start_info);

// MSRs a monitor sets at boot: the syscall/sysenter MSRs cleared, fast
// strings enabled, MTRRs enabled with write-back default type.
std::vector<kvm::MsrEntry> BootMsrs();

}  // namespace dsec::arch
