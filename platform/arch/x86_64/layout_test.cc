// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/layout.h"

#include <gtest/gtest.h>

namespace dsec::arch {
namespace {

TEST(RamRangesTest, SmallGuestIsOneRangeFromZero) {
  auto r = RamRanges(256 * kMiB);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0], (AddressRange{0, 256 * kMiB}));
}

TEST(RamRangesTest, ExactlyThreeGiBStaysBelowTheHole) {
  auto r = RamRanges(3 * kGiB);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].end(), kMmioHoleStart);
}

TEST(RamRangesTest, MemoryAboveThreeGiBContinuesAtFourGiB) {
  auto r = RamRanges(5 * kGiB);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0], (AddressRange{0, 3 * kGiB}));
  EXPECT_EQ((*r)[1], (AddressRange{4 * kGiB, 2 * kGiB}));
}

TEST(RamRangesTest, RejectsUnalignedSize) {
  EXPECT_EQ(RamRanges(64 * kMiB + 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RamRangesTest, RejectsLessThan16MiB) {
  EXPECT_EQ(RamRanges(8 * kMiB).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LayoutTest, TestDeviceIsInsideTheMmioHole) {
  EXPECT_GE(kTestDeviceBase, kMmioHoleStart);
  EXPECT_LT(kTestDeviceBase, kMmioHoleEnd);
  EXPECT_GE(kVirtioMmioBase, kMmioHoleStart);
}

}  // namespace
}  // namespace dsec::arch
