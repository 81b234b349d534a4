// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/cpu_state.h"

#include <gtest/gtest.h>

#include "platform/arch/x86_64/layout.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::arch {
namespace {

std::unique_ptr<memory::FakeGuestMemory> Mem() {
  auto m = memory::FakeGuestMemory::Create({{0, 16 * kMiB}});
  EXPECT_TRUE(m.ok());
  return std::move(*m);
}

TEST(GdtTest, EncodesFlatDescriptors) {
  auto gdt = BootGdt(CpuMode::kLong64);
  EXPECT_EQ(gdt[0], 0u);
  EXPECT_EQ(gdt[1], 0u);
  EXPECT_EQ(gdt[2], 0x00AF9B000000FFFFull);  // 64-bit code
  EXPECT_EQ(gdt[3], 0x00CF93000000FFFFull);  // data
  EXPECT_EQ(gdt[4], 0x00008B0005800067ull);  // busy TSS at 0x580
  EXPECT_EQ(gdt[5], 0u);
  EXPECT_EQ(BootGdt(CpuMode::kProtected32)[2], 0x00CF9B000000FFFFull);
}

TEST(GdtTest, SegmentFromDescriptorRoundTrips) {
  kvm::Segment cs = SegmentFromGdtEntry(0x00AF9B000000FFFFull, 0x10);
  EXPECT_EQ(cs.base, 0u);
  EXPECT_EQ(cs.limit, 0xFFFFFFFFu);
  EXPECT_EQ(cs.type, 0xB);
  EXPECT_EQ(cs.l, 1);
  EXPECT_EQ(cs.db, 0);
  EXPECT_EQ(cs.g, 1);
  EXPECT_EQ(cs.s, 1);
  EXPECT_EQ(cs.present, 1);
  EXPECT_EQ(cs.selector, 0x10);
  kvm::Segment t = SegmentFromGdtEntry(GdtEntry(0x008B, 0x12345678, 0x67), 0x20);
  EXPECT_EQ(t.base, 0x12345678u);
  EXPECT_EQ(t.limit, 0x67u);
  EXPECT_EQ(t.s, 0);
}

TEST(GdtTest, WritesGdtAndZeroedTss) {
  auto mem = Mem();
  ASSERT_TRUE(mem->Fill(kBootTssAddr, 0xff, 0x68).ok());
  ASSERT_TRUE(WriteBootGdt(*mem, CpuMode::kLong64).ok());
  EXPECT_EQ(*mem->ReadObj<uint64_t>(kBootGdtAddr + 0x10), 0x00AF9B000000FFFFull);
  EXPECT_EQ(*mem->ReadObj<uint64_t>(kBootTssAddr + 0x60), 0u);
}

TEST(PageTableTest, IdentityMapsFirstFourGiBWithLargePages) {
  auto mem = Mem();
  ASSERT_TRUE(WriteIdentityPageTables(*mem).ok());
  EXPECT_EQ(*mem->ReadObj<uint64_t>(kPml4Addr), kPdptAddr | 0x7);
  EXPECT_EQ(*mem->ReadObj<uint64_t>(kPml4Addr + 8), 0u);
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(*mem->ReadObj<uint64_t>(kPdptAddr + i * 8), (kPdAddr + i * 0x1000) | 0x7);
  }
  EXPECT_EQ(*mem->ReadObj<uint64_t>(kPdptAddr + 32), 0u);
  EXPECT_EQ(*mem->ReadObj<uint64_t>(kPdAddr), 0x87u);
  EXPECT_EQ(*mem->ReadObj<uint64_t>(kPdAddr + 8), 0x200000u | 0x87);
  // The test device page (0xD8000000) is mapped: PD 3, entry 0xC0.
  uint64_t dev = kTestDeviceBase;
  uint64_t pde = *mem->ReadObj<uint64_t>(kPdAddr + (dev >> 30) * 0x1000 + ((dev >> 21) & 511) * 8);
  EXPECT_EQ(pde, dev | 0x87);
  EXPECT_EQ(*mem->ReadObj<uint64_t>(0xEFF8), (4 * kGiB - 2 * kMiB) | 0x87);
}

TEST(CpuStateTest, LongModeStateMatchesBootProtocol) {
  kvm::SpecialRegisters sr = LongModeSregs();
  EXPECT_EQ(sr.cr0, 0x80050033u);
  EXPECT_EQ(sr.cr4, 0x20u);
  EXPECT_EQ(sr.efer, 0xd01u);
  EXPECT_EQ(sr.cr3, kPml4Addr);
  EXPECT_EQ(sr.cs.selector, 0x10);
  EXPECT_EQ(sr.cs.l, 1);
  EXPECT_EQ(sr.ds.selector, 0x18);
  EXPECT_EQ(sr.ss.selector, 0x18);
  EXPECT_EQ(sr.tr.type, 11);
  EXPECT_EQ(sr.gdt.base, kBootGdtAddr);
  EXPECT_EQ(sr.gdt.limit, 47);
  EXPECT_EQ(sr.apic_base, 0xFEE00900u);
  kvm::Registers r = Linux64Registers(0x1000000, kZeroPageAddr);
  EXPECT_EQ(r.rip, 0x1000000u);
  EXPECT_EQ(r.rsi, kZeroPageAddr);
  EXPECT_EQ(r.rsp, kBootStackTop);
  EXPECT_EQ(r.rbp, kBootStackTop);
  EXPECT_EQ(r.rflags, 2u);
}

TEST(CpuStateTest, PvhStateIsFlatProtectedModeWithoutPaging) {
  kvm::SpecialRegisters sr = ProtectedModeSregs();
  EXPECT_EQ(sr.cr0, 1u);
  EXPECT_EQ(sr.cr4, 0u);
  EXPECT_EQ(sr.efer, 0u);
  EXPECT_EQ(sr.cs.db, 1);
  EXPECT_EQ(sr.cs.l, 0);
  EXPECT_EQ(sr.cs.base, 0u);
  EXPECT_EQ(sr.cs.limit, 0xFFFFFFFFu);
  EXPECT_EQ(sr.ds.limit, 0xFFFFFFFFu);
  kvm::Registers r = PvhRegisters(0x1000040, 0x6000);
  EXPECT_EQ(r.rbx, 0x6000u);
  EXPECT_EQ(r.rip, 0x1000040u);
  EXPECT_EQ(r.rflags, 2u);
}

TEST(CpuStateTest, BootMsrsEnableFastStringsAndWriteBackMtrr) {
  bool saw_misc = false, saw_mtrr = false;
  for (const auto& m : BootMsrs()) {
    if (m.index == kMsrIa32MiscEnable) saw_misc = m.data == 1;
    else if (m.index == kMsrMtrrDefType) saw_mtrr = m.data == 0x806;
    else EXPECT_EQ(m.data, 0u) << m.index;
  }
  EXPECT_TRUE(saw_misc);
  EXPECT_TRUE(saw_mtrr);
}

}  // namespace
}  // namespace dsec::arch
