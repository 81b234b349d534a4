// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/pvh.h"

#include <gtest/gtest.h>

#include "platform/memory/fake_guest_memory.h"

namespace dsec::arch {
namespace {

TEST(PvhTest, StructLayoutsMatchStartInfoHeader) {
  EXPECT_EQ(offsetof(HvmStartInfo, modlist_paddr), 16u);
  EXPECT_EQ(offsetof(HvmStartInfo, cmdline_paddr), 24u);
  EXPECT_EQ(offsetof(HvmStartInfo, rsdp_paddr), 32u);
  EXPECT_EQ(offsetof(HvmStartInfo, memmap_paddr), 40u);
  EXPECT_EQ(offsetof(HvmStartInfo, memmap_entries), 48u);
}

TEST(PvhTest, WritesStartInfoMemmapAndModule) {
  auto mem = memory::FakeGuestMemory::Create({{0, 16 * kMiB}});
  ASSERT_TRUE(mem.ok());
  std::vector<E820Entry> map = {{0, 0x9fc00, kE820Ram}, {0x9fc00, 0x60400, kE820Reserved}};
  ASSERT_TRUE(WritePvhStartInfo(**mem, kCmdlineAddr, map, AddressRange{0x800000, 0x3000}).ok());
  auto info = (*mem)->ReadObj<HvmStartInfo>(kPvhStartInfoAddr);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->magic, 0x336ec578u);
  EXPECT_EQ(info->version, 1u);
  EXPECT_EQ(info->cmdline_paddr, kCmdlineAddr);
  EXPECT_EQ(info->memmap_paddr, kPvhStartInfoAddr + 56);
  EXPECT_EQ(info->memmap_entries, 2u);
  EXPECT_EQ(info->nr_modules, 1u);
  auto e1 = (*mem)->ReadObj<HvmMemmapTableEntry>(info->memmap_paddr + 24);
  EXPECT_EQ(e1->addr, 0x9fc00u);
  EXPECT_EQ(e1->type, kE820Reserved);
  auto mod = (*mem)->ReadObj<HvmModlistEntry>(info->modlist_paddr);
  EXPECT_EQ(mod->paddr, 0x800000u);
  EXPECT_EQ(mod->size, 0x3000u);
}

TEST(PvhTest, NoModulesWithoutInitrd) {
  auto mem = memory::FakeGuestMemory::Create({{0, 16 * kMiB}});
  ASSERT_TRUE(mem.ok());
  ASSERT_TRUE(WritePvhStartInfo(**mem, kCmdlineAddr, {}, std::nullopt).ok());
  auto info = (*mem)->ReadObj<HvmStartInfo>(kPvhStartInfoAddr);
  EXPECT_EQ(info->nr_modules, 0u);
  EXPECT_EQ(info->modlist_paddr, 0u);
}

}  // namespace
}  // namespace dsec::arch
