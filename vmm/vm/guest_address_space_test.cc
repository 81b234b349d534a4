// SPDX-License-Identifier: Apache-2.0
#include "vmm/vm/guest_address_space.h"

#include <vector>

#include "gtest/gtest.h"

namespace dsec::vm {
namespace {

std::vector<uint64_t> PlaceAll(const std::vector<arch::AddressRange>& ram,
                               const std::vector<uint64_t>& sizes, absl::Status* error,
                               uint64_t limit = kWindowGpaLimit) {
  WindowPlacer placer(ram, limit);
  std::vector<uint64_t> starts;
  for (uint64_t size : sizes) {
    absl::StatusOr<uint64_t> start = placer.Place(size);
    if (!start.ok()) {
      *error = start.status();
      break;
    }
    starts.push_back(*start);
  }
  return starts;
}

TEST(WindowPlacerTest, PlacesAfterLowRamTwoMiBAligned) {
  absl::Status error;
  auto starts = PlaceAll({{0, (128ull << 20) + 4096}}, {2ull << 20, 256ull << 20}, &error);
  ASSERT_TRUE(error.ok()) << error;
  EXPECT_EQ(starts[0], 130ull << 20);
  EXPECT_EQ(starts[1], 132ull << 20);
}

TEST(WindowPlacerTest, GoesAboveFourGiBWhenTheHoleIsInTheWay) {
  absl::Status error;
  auto starts = PlaceAll({{0, 3ull << 30}, {4ull << 30, 1ull << 30}}, {2ull << 20}, &error);
  ASSERT_TRUE(error.ok()) << error;
  EXPECT_EQ(starts[0], 5ull << 30);
  // Low RAM that leaves too little room below the hole: also above 4 GiB.
  starts = PlaceAll({{0, (3ull << 30) - (2ull << 20)}}, {2ull << 20, 2ull << 20}, &error);
  ASSERT_TRUE(error.ok()) << error;
  EXPECT_EQ(starts[0], (3ull << 30) - (2ull << 20));
  EXPECT_EQ(starts[1], 4ull << 30);
}

TEST(WindowPlacerTest, NeverOverlapsRamOrTheHole) {
  const std::vector<arch::AddressRange> ram{{0, 1ull << 30}};
  const std::vector<uint64_t> sizes{1ull << 30, 1ull << 30, 2ull << 20};
  absl::Status error;
  auto starts = PlaceAll(ram, sizes, &error);
  ASSERT_TRUE(error.ok()) << error;
  const arch::AddressRange hole{arch::kMmioHoleStart, arch::kMmioHoleEnd - arch::kMmioHoleStart};
  for (size_t i = 0; i < sizes.size(); ++i) {
    arch::AddressRange w{starts[i], sizes[i]};
    EXPECT_FALSE(w.Overlaps(hole)) << i;
    EXPECT_FALSE(w.Overlaps(ram[0])) << i;
    EXPECT_EQ(w.start % kWindowAlignment, 0u);
  }
}

TEST(WindowPlacerTest, RefusesTooManyWindowsForTheAddressSpace) {
  absl::Status error;
  auto starts = PlaceAll({{0, 64ull << 20}}, std::vector<uint64_t>(5, 2ull << 30), &error,
                         8ull << 30);
  EXPECT_EQ(error.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(error.message().find("too many"), absl::string_view::npos);
  EXPECT_LT(starts.size(), 5u);
}

TEST(WindowPlacerTest, RefusesUnalignedSize) {
  absl::Status error;
  PlaceAll({{0, 64ull << 20}}, {4096}, &error);
  EXPECT_EQ(error.code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsec::vm
