// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/e820.h"

#include <gtest/gtest.h>

#include "platform/memory/fake_guest_memory.h"

namespace dsec::arch {
namespace {

TEST(BuildE820Test, CarvesLowReservedAreaOutOfRam) {
  const AddressRange ram[] = {{0, 64 * kMiB}};
  const AddressRange reserved[] = {kLowReservedArea};
  auto m = BuildE820(ram, reserved);
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<E820Entry> want = {{0, 0x9FC00, kE820Ram},
                                 {0x9FC00, 0x100000 - 0x9FC00, kE820Reserved},
                                 {0x100000, 64 * kMiB - 0x100000, kE820Ram}};
  EXPECT_EQ(*m, want);
}

TEST(BuildE820Test, KeepsTheMmioHoleOutOfTheMap) {
  auto ram = RamRanges(5 * kGiB);
  ASSERT_TRUE(ram.ok());
  auto m = BuildE820(*ram, {});
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[0], (E820Entry{0, 3 * kGiB, kE820Ram}));
  EXPECT_EQ((*m)[1], (E820Entry{4 * kGiB, 2 * kGiB, kE820Ram}));
}

TEST(BuildE820Test, SortsAndMergesAdjacentAndOverlappingRanges) {
  const AddressRange ram[] = {{0x200000, 0x100000}, {0, 0x100000}, {0x100000, 0x100000}};
  const AddressRange reserved[] = {{0x80000, 0x10000}, {0x88000, 0x10000}, {0x98000, 0x8000}};
  auto m = BuildE820(ram, reserved);
  ASSERT_TRUE(m.ok());
  std::vector<E820Entry> want = {{0, 0x80000, kE820Ram},
                                 {0x80000, 0x20000, kE820Reserved},
                                 {0xA0000, 0x300000 - 0xA0000, kE820Ram}};
  EXPECT_EQ(*m, want);
}

TEST(BuildE820Test, ReportsReservedRangesOutsideRam) {
  const AddressRange ram[] = {{0, 0x100000}};
  const AddressRange reserved[] = {{kIoApicBase, 0x1000}};
  auto m = BuildE820(ram, reserved);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[1], (E820Entry{kIoApicBase, 0x1000, kE820Reserved}));
}

TEST(BuildE820Test, RejectsMoreThan128Entries) {
  std::vector<AddressRange> ram;
  for (uint64_t i = 0; i < 129; ++i) ram.push_back({i * 0x2000, 0x1000});
  auto m = BuildE820(ram, {});
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  ram.pop_back();
  EXPECT_TRUE(BuildE820(ram, {}).ok());
}

TEST(BuildE820Test, RejectsWrappingRange) {
  const AddressRange ram[] = {{UINT64_MAX - 0xfff, 0x2000}};
  EXPECT_EQ(BuildE820(ram, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GuestE820Test, UsesGuestRegions) {
  auto mem = memory::FakeGuestMemory::Create({{0, 32 * kMiB}});
  ASSERT_TRUE(mem.ok());
  auto m = GuestE820(**mem);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ((*m)[2], (E820Entry{0x100000, 31 * kMiB, kE820Ram}));
}

}  // namespace
}  // namespace dsec::arch
