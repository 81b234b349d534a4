// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/cpu_state.h"

#include <cstring>

#include "platform/arch/x86_64/layout.h"
#include "base/status.h"

namespace dsec::arch {

namespace {
// Descriptor "flags" values (access byte | G/DB/L nibble << 12).
constexpr uint16_t kCode64Flags = 0xA09B;  // G, L, P, DPL0, code exec/read accessed
constexpr uint16_t kCode32Flags = 0xC09B;  // G, D, P, DPL0, code exec/read accessed
constexpr uint16_t kDataFlags = 0xC093;    // G, B, P, DPL0, data read/write accessed
constexpr uint16_t kTssFlags = 0x008B;     // P, system type 0xB: busy TSS (KVM wants busy)

// Page-table entry bits (SDM Vol. 3A, 4.5).
constexpr uint64_t kPtePresent = 1u << 0, kPteWrite = 1u << 1, kPteUser = 1u << 2,
                   kPteLarge = 1u << 7;
constexpr uint64_t kPteTable = kPtePresent | kPteWrite | kPteUser;
constexpr uint64_t kEntriesPerTable = 512;
constexpr uint64_t kNumPds = kIdentityMapBytes / kGiB;
static_assert(kPdAddr + kNumPds * kPageSize == 0xF000);
}  // namespace

uint64_t GdtEntry(uint16_t flags, uint32_t base, uint32_t limit) {
  return ((uint64_t{base} & 0xFF00'0000) << 32) | ((uint64_t{flags} & 0xF0FF) << 40) |
         ((uint64_t{limit} & 0xF'0000) << 32) | ((uint64_t{base} & 0xFF'FFFF) << 16) |
         (uint64_t{limit} & 0xFFFF);
}

kvm::Segment SegmentFromGdtEntry(uint64_t entry, uint16_t selector) {
  kvm::Segment s;
  s.base = ((entry >> 16) & 0xFF'FFFF) | ((entry >> 32) & 0xFF00'0000);
  uint32_t limit = static_cast<uint32_t>((entry & 0xFFFF) | ((entry >> 32) & 0xF'0000));
  s.g = (entry >> 55) & 1;
  // KVM takes the byte-granular limit; a 4 KiB-granular one covers the page.
  s.limit = s.g ? (limit << 12) | 0xFFF : limit;
  s.selector = selector;
  s.type = (entry >> 40) & 0xF;
  s.s = (entry >> 44) & 1;
  s.dpl = (entry >> 45) & 3;
  s.present = (entry >> 47) & 1;
  s.avl = (entry >> 52) & 1;
  s.l = (entry >> 53) & 1;
  s.db = (entry >> 54) & 1;
  s.unusable = s.present ? 0 : 1;
  return s;
}

std::array<uint64_t, kBootGdtEntries> BootGdt(CpuMode mode) {
  std::array<uint64_t, kBootGdtEntries> gdt{};
  gdt[kBootCodeSelector / 8] =
      GdtEntry(mode == CpuMode::kLong64 ? kCode64Flags : kCode32Flags, 0, 0xFFFFF);
  gdt[kBootDataSelector / 8] = GdtEntry(kDataFlags, 0, 0xFFFFF);
  // A 64-bit TSS descriptor takes two slots; the upper one holds base[63:32],
  // which is 0 here. A 32-bit TSS uses only the first.
  gdt[kBootTssSelector / 8] = GdtEntry(kTssFlags, kBootTssAddr, kBootTssLimit);
  return gdt;
}

absl::Status WriteBootGdt(const memory::GuestMemory& mem, CpuMode mode) {
  std::array<uint64_t, kBootGdtEntries> gdt = BootGdt(mode);
  DSEC_RETURN_IF_ERROR(mem.WriteObj(kBootGdtAddr, gdt));
  return mem.Fill(kBootTssAddr, 0, kBootTssLimit + 1);
}

absl::Status WriteIdentityPageTables(const memory::GuestMemory& mem) {
  std::array<uint64_t, kEntriesPerTable> pml4{};
  pml4[0] = kPdptAddr | kPteTable;
  std::array<uint64_t, kEntriesPerTable> pdpt{};
  for (uint64_t i = 0; i < kNumPds; ++i) pdpt[i] = (kPdAddr + i * kPageSize) | kPteTable;
  DSEC_RETURN_IF_ERROR(mem.WriteObj(kPml4Addr, pml4));
  DSEC_RETURN_IF_ERROR(mem.WriteObj(kPdptAddr, pdpt));
  for (uint64_t i = 0; i < kNumPds; ++i) {
    std::array<uint64_t, kEntriesPerTable> pd{};
    for (uint64_t j = 0; j < kEntriesPerTable; ++j) {
      pd[j] = (i * kGiB + j * 2 * kMiB) | kPteTable | kPteLarge;
    }
    DSEC_RETURN_IF_ERROR(mem.WriteObj(kPdAddr + i * kPageSize, pd));
  }
  return absl::OkStatus();
}

namespace {
kvm::SpecialRegisters SregsFromGdt(CpuMode mode) {
  const auto gdt = BootGdt(mode);
  kvm::SpecialRegisters sr;
  sr.cs = SegmentFromGdtEntry(gdt[kBootCodeSelector / 8], kBootCodeSelector);
  const kvm::Segment data = SegmentFromGdtEntry(gdt[kBootDataSelector / 8], kBootDataSelector);
  sr.ds = sr.es = sr.fs = sr.gs = sr.ss = data;
  sr.tr = SegmentFromGdtEntry(gdt[kBootTssSelector / 8], kBootTssSelector);
  // No LDT: mark it unusable so KVM skips its checks.
  sr.ldt.type = 2;
  sr.ldt.unusable = 1;
  sr.gdt.base = kBootGdtAddr;
  sr.gdt.limit = static_cast<uint16_t>(sizeof(uint64_t) * kBootGdtEntries - 1);
  // No IDT until the kernel installs one; interrupts are off (RFLAGS.IF=0).
  sr.idt.base = 0;
  sr.idt.limit = 0;
  sr.apic_base = kBspApicBase;
  return sr;
}
}  // namespace

kvm::SpecialRegisters LongModeSregs() {
  kvm::SpecialRegisters sr = SregsFromGdt(CpuMode::kLong64);
  sr.cr0 = kLongModeCr0;
  sr.cr3 = kPml4Addr;
  // PAE only: PCIDE makes KVM_SET_SREGS fail unless CPUID offers PCID, and
  // the kernel sets the rest itself.
  sr.cr4 = kCr4Pae;
  sr.efer = kLongModeEfer;
  return sr;
}

kvm::Registers Linux64Registers(uint64_t entry, uint64_t zero_page) {
  kvm::Registers r;
  r.rip = entry;
  r.rsi = zero_page;  // boot protocol: %rsi holds the boot_params address
  r.rsp = kBootStackTop;
  r.rbp = kBootStackTop;
  r.rflags = 0x2;  // bit 1 is reserved-as-one; interrupts off
  return r;
}

kvm::SpecialRegisters ProtectedModeSregs() {
  kvm::SpecialRegisters sr = SregsFromGdt(CpuMode::kProtected32);
  // PVH boot ABI (xen/include/public/arch-x86/hvm/start_info.h): CR0.PE set,
  // paging off, CR4 and EFER clear.
  sr.cr0 = kCr0Pe;
  return sr;
}

kvm::Registers PvhRegisters(uint32_t entry, uint32_t start_info) {
  kvm::Registers r;
  r.rip = entry;
  r.rbx = start_info;  // PVH boot ABI: EBX = hvm_start_info physical address
  r.rflags = 0x2;
  return r;
}

std::vector<kvm::MsrEntry> BootMsrs() {
  auto msr = [](uint32_t index, uint64_t data) {
    kvm::MsrEntry e;
    e.index = index;
    e.data = data;
    return e;
  };
  return {
      msr(kMsrIa32SysenterCs, 0),      msr(kMsrIa32SysenterEsp, 0),
      msr(kMsrIa32SysenterEip, 0),     msr(kMsrStar, 0),
      msr(kMsrLstar, 0),               msr(kMsrCstar, 0),
      msr(kMsrKernelGsBase, 0),        msr(kMsrSyscallMask, 0),
      msr(kMsrIa32MiscEnable, kMiscEnableFastString),
      msr(kMsrMtrrDefType, kMtrrDefTypeWbEnabled),
  };
}

}  // namespace dsec::arch
