// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/boot.h"

#include <gtest/gtest.h>

#include <cstring>

#include "platform/arch/x86_64/acpi.h"
#include "platform/arch/x86_64/cpu_state.h"
#include "platform/arch/x86_64/pvh.h"
#include "platform/arch/x86_64/test_images.h"
#include "platform/arch/x86_64/zero_page.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::arch {
namespace {

using testing::BuildBzImage;
using testing::BuildElf32;
using testing::BuildElf64;
using testing::PvhNote;

class SetupBootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = memory::FakeGuestMemory::Create({{0, 64 * kMiB}});
    ASSERT_TRUE(m.ok());
    mem_ = std::move(*m);
  }
  bool MemoryIsZero() {
    auto p = mem_->HostAddress(0, 64 * kMiB);
    for (uint64_t i = 0; i < 64 * kMiB; ++i) {
      if ((*p)[i] != 0) return false;
    }
    return true;
  }
  std::unique_ptr<memory::FakeGuestMemory> mem_;
};

TEST_F(SetupBootTest, BootsElf64WithLinux64ZeroPageAndInitrd) {
  auto img = BuildElf64(0x1000000, {{PT_LOAD, 0x1000000, std::vector<uint8_t>(0x100, 0x90)},
                                    {PT_NOTE, 0, PvhNote(0x1000010)}});
  std::vector<uint8_t> initrd(0x3000, 0x42);
  BootConfig cfg{img, initrd, "console=ttyS0 quiet", 2, BootProtocol::kAuto};
  auto plan = SetupBoot(*mem_, cfg);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->protocol, BootProtocol::kLinux64);
  EXPECT_EQ(plan->regs.rip, 0x1000000u);
  EXPECT_EQ(plan->regs.rsi, kZeroPageAddr);
  EXPECT_EQ(plan->sregs.cr3, kPml4Addr);
  ASSERT_TRUE(plan->initrd);
  EXPECT_EQ(plan->initrd->end(), (64 * kMiB) & ~0xfffull);
  auto bp = mem_->ReadObj<boot_params>(kZeroPageAddr);
  ASSERT_TRUE(bp.ok());
  EXPECT_EQ(bp->hdr.ramdisk_image, plan->initrd->start);
  EXPECT_EQ(bp->hdr.ramdisk_size, 0x3000u);
  EXPECT_EQ(bp->e820_entries, 3);
  EXPECT_EQ(*mem_->ReadObj<uint8_t>(plan->initrd->start + 0x2fff), 0x42);
  char cmd[20];
  ASSERT_TRUE(mem_->Read(kCmdlineAddr, {reinterpret_cast<uint8_t*>(cmd), 20}).ok());
  EXPECT_STREQ(cmd, "console=ttyS0 quiet");
  EXPECT_EQ(*mem_->ReadObj<uint64_t>(kPml4Addr), kPdptAddr | 7);
  EXPECT_EQ(std::memcmp(*mem_->HostAddress(kMpTableAddr, 4), "_MP_", 4), 0);
  // ACPI: the RSDP where Linux scans, and its address in the zero page.
  EXPECT_EQ(std::memcmp(*mem_->HostAddress(kAcpiTablesAddr, 8), "RSD PTR ", 8), 0);
  EXPECT_EQ(bp->acpi_rsdp_addr, kAcpiTablesAddr);
}

TEST_F(SetupBootTest, AcpiOffWritesNoTables) {
  auto img = BuildElf64(0x1000000, {{PT_LOAD, 0x1000000, std::vector<uint8_t>(0x100, 0x90)}});
  BootConfig cfg{img, std::nullopt, "x", 1, BootProtocol::kLinux64};
  cfg.acpi = false;
  ASSERT_TRUE(SetupBoot(*mem_, cfg).ok());
  EXPECT_EQ(*mem_->ReadObj<uint64_t>(kAcpiTablesAddr), 0u);
  EXPECT_EQ(mem_->ReadObj<boot_params>(kZeroPageAddr)->acpi_rsdp_addr, 0u);
}

TEST_F(SetupBootTest, BootsBzImageWithSetupHeaderInZeroPage) {
  auto img = BuildBzImage(testing::BzOptions{});
  auto plan = SetupBoot(*mem_, {img, std::nullopt, "x", 1, BootProtocol::kLinux64});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->regs.rip, 0x100200u);
  auto bp = mem_->ReadObj<boot_params>(kZeroPageAddr);
  EXPECT_EQ(bp->hdr.version, 0x020f);
  EXPECT_EQ(bp->hdr.type_of_loader, 0xff);
  EXPECT_EQ(bp->hdr.cmd_line_ptr, kCmdlineAddr);
}

TEST_F(SetupBootTest, PvhWhenAskedAndNotePresent) {
  auto img = BuildElf64(0x1000000, {{PT_LOAD, 0x1000000, std::vector<uint8_t>(0x100, 0x90)},
                                    {PT_NOTE, 0, PvhNote(0x1000010)}});
  std::vector<uint8_t> initrd(0x1000, 1);
  auto plan = SetupBoot(*mem_, {img, initrd, "pvh", 1, BootProtocol::kPvh});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->protocol, BootProtocol::kPvh);
  EXPECT_EQ(plan->regs.rip, 0x1000010u);
  EXPECT_EQ(plan->regs.rbx, kPvhStartInfoAddr);
  EXPECT_EQ(plan->sregs.cr0, 1u);
  auto info = mem_->ReadObj<HvmStartInfo>(kPvhStartInfoAddr);
  EXPECT_EQ(info->magic, kHvmStartMagic);
  EXPECT_EQ(info->nr_modules, 1u);
  EXPECT_EQ(info->memmap_entries, 3u);
  EXPECT_EQ(info->rsdp_paddr, kAcpiTablesAddr);
}

TEST_F(SetupBootTest, Elf32WithPvhNoteBootsPvhOnAuto) {
  auto img = BuildElf32(0x1000000, {{PT_LOAD, 0x1000000, std::vector<uint8_t>(0x100, 0x90)},
                                    {PT_NOTE, 0, PvhNote(0x1000000, 4)}});
  auto plan = SetupBoot(*mem_, {img, std::nullopt, "", 1, BootProtocol::kAuto});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->protocol, BootProtocol::kPvh);
  EXPECT_EQ(SetupBoot(*mem_, {img, std::nullopt, "", 1, BootProtocol::kLinux64}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SetupBootTest, RejectsPvhWithoutNoteAndWritesNothing) {
  auto img = BuildElf64(0x1000000, {{PT_LOAD, 0x1000000, std::vector<uint8_t>(0x100, 0x90)}});
  auto s = SetupBoot(*mem_, {img, std::nullopt, "", 1, BootProtocol::kPvh}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MemoryIsZero());
}

TEST_F(SetupBootTest, InvalidInputsWriteNothing) {
  auto good = BuildElf64(0x1000000, {{PT_LOAD, 0x1000000, std::vector<uint8_t>(0x100, 0x90)}});
  auto bad = BuildElf64(0x1000000, {{PT_LOAD, 0x1000000, std::vector<uint8_t>(0x100, 0x90)},
                                    {PT_LOAD, 0x9000, std::vector<uint8_t>(0x10, 1)}});
  std::vector<uint8_t> huge(63 * kMiB, 1);
  EXPECT_FALSE(SetupBoot(*mem_, {bad, std::nullopt, "", 1, BootProtocol::kAuto}).ok());
  EXPECT_FALSE(SetupBoot(*mem_, {good, huge, "", 1, BootProtocol::kAuto}).ok());
  EXPECT_FALSE(SetupBoot(*mem_, {good, std::nullopt, "", 65, BootProtocol::kAuto}).ok());
  EXPECT_FALSE(
      SetupBoot(*mem_, {good, std::nullopt, std::string(70000, 'a'), 1, BootProtocol::kAuto})
          .ok());
  EXPECT_TRUE(MemoryIsZero());
}

TEST(BootProtocolTest, ParsesNames) {
  EXPECT_EQ(*ParseBootProtocol("pvh"), BootProtocol::kPvh);
  EXPECT_EQ(*ParseBootProtocol("linux64"), BootProtocol::kLinux64);
  EXPECT_EQ(*ParseBootProtocol("auto"), BootProtocol::kAuto);
  EXPECT_FALSE(ParseBootProtocol("bios").ok());
}

}  // namespace
}  // namespace dsec::arch
