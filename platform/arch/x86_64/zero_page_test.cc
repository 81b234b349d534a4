// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/zero_page.h"

#include <gtest/gtest.h>

#include "platform/arch/x86_64/test_images.h"
#include "base/status.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::arch {
namespace {

std::unique_ptr<memory::FakeGuestMemory> Mem(uint64_t size) {
  auto m = memory::FakeGuestMemory::Create({{0, size}});
  DSEC_CHECK(m.ok());
  return std::move(*m);
}

KernelImage ElfKernelAt(uint64_t start, uint64_t size) {
  KernelImage k;
  k.footprint = {start, size};
  return k;
}

TEST(PlaceInitrdTest, PlacesPageAlignedAtTopOfLowRam) {
  auto mem = Mem(64 * kMiB);
  auto r = PlaceInitrd(0x1234, ElfKernelAt(0x1000000, 0x100000), *mem);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->start, (64 * kMiB - 0x1234) & ~0xfffull);
  EXPECT_EQ(r->start % kPageSize, 0u);
  EXPECT_LE(r->end(), 64 * kMiB);
}

TEST(PlaceInitrdTest, StaysBelowInitrdAddrMax) {
  auto mem = Mem(64 * kMiB);
  KernelImage k = ElfKernelAt(0x100000, 0x100000);
  k.initrd_addr_max = 0x2000000 - 1;
  auto r = PlaceInitrd(0x10000, k, *mem);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->end(), 0x2000000u);
}

TEST(PlaceInitrdTest, GoesBelowAKernelAtTheTopOfRam) {
  auto mem = Mem(32 * kMiB);
  auto r = PlaceInitrd(0x100000, ElfKernelAt(16 * kMiB, 16 * kMiB), *mem);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->end(), 16 * kMiB);
}

TEST(PlaceInitrdTest, RejectsTooLargeInitrd) {
  auto mem = Mem(32 * kMiB);
  auto r = PlaceInitrd(31 * kMiB, ElfKernelAt(16 * kMiB, 0x100000), *mem);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlaceInitrd(uint64_t{1} << 40, ElfKernelAt(16 * kMiB, 1), *mem).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlaceInitrd(0, ElfKernelAt(16 * kMiB, 1), *mem).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CheckCmdlineTest, EnforcesKernelAndMonitorLimits) {
  KernelImage k;
  EXPECT_TRUE(CheckCmdline("console=ttyS0", k).ok());
  EXPECT_TRUE(CheckCmdline(std::string(kCmdlineMaxBytes - 1, 'a'), k).ok());
  EXPECT_FALSE(CheckCmdline(std::string(kCmdlineMaxBytes, 'a'), k).ok());
  k.cmdline_max = 10;
  EXPECT_TRUE(CheckCmdline("0123456789", k).ok());
  EXPECT_EQ(CheckCmdline("0123456789a", k).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckCmdline(std::string("a\0b", 3), KernelImage{}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BuildZeroPageTest, FillsLoaderFieldsForElfKernel) {
  std::vector<E820Entry> e820 = {{0, 0x9fc00, kE820Ram}, {0x100000, 0x100000, kE820Ram}};
  auto bp = BuildZeroPage(KernelImage{}, kCmdlineAddr, 13, AddressRange{0x3000000, 0x5000},
                          e820);
  ASSERT_TRUE(bp.ok());
  EXPECT_EQ(bp->hdr.boot_flag, 0xAA55);
  EXPECT_EQ(std::memcmp(&bp->hdr.header, "HdrS", 4), 0);
  EXPECT_EQ(bp->hdr.type_of_loader, 0xff);
  EXPECT_EQ(bp->hdr.cmd_line_ptr, kCmdlineAddr);
  EXPECT_EQ(bp->hdr.cmdline_size, 13u);
  EXPECT_EQ(bp->hdr.ramdisk_image, 0x3000000u);
  EXPECT_EQ(bp->hdr.ramdisk_size, 0x5000u);
  ASSERT_EQ(bp->e820_entries, 2);
  EXPECT_EQ(bp->e820_table[1].addr, 0x100000u);
  EXPECT_EQ(bp->e820_table[1].type, kE820Ram);
}

TEST(BuildZeroPageTest, CopiesBzImageSetupHeader) {
  auto mem = Mem(64 * kMiB);
  auto img = testing::BuildBzImage(testing::BzOptions{});
  auto k = ParseKernel(img, *mem);
  ASSERT_TRUE(k.ok());
  auto bp = BuildZeroPage(*k, kCmdlineAddr, 5, std::nullopt, {});
  ASSERT_TRUE(bp.ok());
  EXPECT_EQ(bp->hdr.version, 0x020f);
  EXPECT_EQ(bp->hdr.cmdline_size, 2047u);  // the kernel's, untouched
  EXPECT_EQ(bp->hdr.init_size, 0x100000u);
  EXPECT_EQ(bp->hdr.type_of_loader, 0xff);
  EXPECT_EQ(bp->hdr.ramdisk_image, 0u);
  EXPECT_EQ(bp->sentinel, 0);
}

TEST(BuildZeroPageTest, RejectsTooManyE820Entries) {
  std::vector<E820Entry> e820(129, E820Entry{0, 0x1000, kE820Ram});
  EXPECT_FALSE(BuildZeroPage(KernelImage{}, kCmdlineAddr, 0, std::nullopt, e820).ok());
}

}  // namespace
}  // namespace dsec::arch
