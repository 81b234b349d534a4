// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/mptable.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include "platform/arch/x86_64/layout.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::arch {
namespace {

uint8_t Sum(const uint8_t* p, size_t n) {
  uint8_t s = 0;
  for (size_t i = 0; i < n; ++i) s = static_cast<uint8_t>(s + p[i]);
  return s;
}

TEST(MpTableTest, ChecksumsAndHeaderAreValid) {
  auto t = BuildMpTable(4, kMpTableAddr);
  ASSERT_TRUE(t.ok());
  MpFloatingPointer fp;
  std::memcpy(&fp, t->data(), sizeof(fp));
  EXPECT_EQ(std::memcmp(fp.signature, "_MP_", 4), 0);
  EXPECT_EQ(fp.config_table, kMpTableAddr + 16);
  EXPECT_EQ(fp.length, 1);
  EXPECT_EQ(fp.spec_rev, 4);
  EXPECT_EQ(Sum(t->data(), 16), 0);
  MpConfigHeader h;
  std::memcpy(&h, t->data() + 16, sizeof(h));
  EXPECT_EQ(std::memcmp(h.signature, "PCMP", 4), 0);
  EXPECT_EQ(h.base_table_length, t->size() - 16);
  EXPECT_EQ(Sum(t->data() + 16, h.base_table_length), 0);
  EXPECT_EQ(h.entry_count, 4 + 1 + 1 + 16 + 2);
  EXPECT_EQ(h.lapic_address, kLapicBase);
}

TEST(MpTableTest, ListsProcessorsBusIoApicAndInterrupts) {
  auto t = BuildMpTable(3, kMpTableAddr);
  ASSERT_TRUE(t.ok());
  const uint8_t* p = t->data() + 16 + 44;
  for (uint8_t i = 0; i < 3; ++i, p += 20) {
    MpProcessorEntry e;
    std::memcpy(&e, p, sizeof(e));
    EXPECT_EQ(e.type, kMpEntryProcessor);
    EXPECT_EQ(e.lapic_id, i);
    EXPECT_EQ(e.cpu_flags, i == 0 ? 3 : 1);
  }
  MpBusEntry bus;
  std::memcpy(&bus, p, 8);
  EXPECT_EQ(bus.type, kMpEntryBus);
  EXPECT_EQ(std::memcmp(bus.bus_type, "ISA   ", 6), 0);
  p += 8;
  MpIoApicEntry io;
  std::memcpy(&io, p, 8);
  EXPECT_EQ(io.type, kMpEntryIoApic);
  EXPECT_EQ(io.id, 3);
  EXPECT_EQ(io.address, kIoApicBase);
  p += 8;
  for (uint8_t irq = 0; irq < 16; ++irq, p += 8) {
    MpInterruptEntry e;
    std::memcpy(&e, p, 8);
    EXPECT_EQ(e.type, kMpEntryIoInterrupt);
    EXPECT_EQ(e.source_irq, irq);
    EXPECT_EQ(e.dest_id, 3);
    EXPECT_EQ(e.dest_pin, irq);
  }
  MpInterruptEntry l0, l1;
  std::memcpy(&l0, p, 8);
  std::memcpy(&l1, p + 8, 8);
  EXPECT_EQ(l0.type, kMpEntryLocalInterrupt);
  EXPECT_EQ(l0.irq_type, kMpIrqExtInt);
  EXPECT_EQ(l0.dest_pin, 0);
  EXPECT_EQ(l1.irq_type, kMpIrqNmi);
  EXPECT_EQ(l1.dest_pin, 1);
  EXPECT_EQ(l1.dest_id, 0xff);
  EXPECT_EQ(p + 16, t->data() + t->size());
}

TEST(MpTableTest, RejectsVcpuCountsThatDoNotFit) {
  EXPECT_EQ(BuildMpTable(0, kMpTableAddr).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildMpTable(kMaxVcpus + 1, kMpTableAddr).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto mem = memory::FakeGuestMemory::Create({{0, 2 * kMiB}});
  ASSERT_TRUE(mem.ok());
  EXPECT_TRUE(WriteMpTable(**mem, kMaxVcpus).ok());
  EXPECT_EQ(std::memcmp(*(*mem)->HostAddress(kMpTableAddr, 4), "_MP_", 4), 0);
}

TEST(LapicTest, SetsLint0ExtIntAndLint1Nmi) {
  std::array<uint8_t, 1024> regs{};
  uint32_t masked = 0x10000 | 0x500;
  std::memcpy(&regs[0x350], &masked, 4);
  std::memcpy(&regs[0x360], &masked, 4);
  ConfigureLapicLvt(regs);
  uint32_t l0, l1;
  std::memcpy(&l0, &regs[0x350], 4);
  std::memcpy(&l1, &regs[0x360], 4);
  EXPECT_EQ(l0, 0x700u);
  EXPECT_EQ(l1, 0x400u);
}

}  // namespace
}  // namespace dsec::arch
