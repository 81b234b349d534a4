// SPDX-License-Identifier: Apache-2.0
#include "devices/rng/rng_request.h"

#include "gtest/gtest.h"

namespace dsec::devices {
namespace {

TEST(RngRequestTest, AcceptsWritableOnlyChain) {
  virtio::DescriptorChain chain{0, {}, {{0x1000, 16}, {0x2000, 48}}};
  auto request = ParseRngRequest(chain);
  ASSERT_TRUE(request.ok());
  EXPECT_EQ(request->capacity, 64u);
}

TEST(RngRequestTest, RejectsChainWithReadableBuffers) {
  virtio::DescriptorChain chain{0, {{0x1000, 4}}, {{0x2000, 16}}};
  EXPECT_FALSE(ParseRngRequest(chain).ok());
}

TEST(RngRequestTest, RejectsChainWithoutWritableSpace) {
  virtio::DescriptorChain chain{0, {}, {}};
  EXPECT_FALSE(ParseRngRequest(chain).ok());
}

TEST(RngRequestTest, FillLengthIsSmallestOfCapacityCapAndAllowance) {
  RngRequest r{100};
  EXPECT_EQ(RngFillLength(r, 64, 1000), 64u);
  EXPECT_EQ(RngFillLength(r, 1000, 10), 10u);
  EXPECT_EQ(RngFillLength(r, 1000, 1000), 100u);
  EXPECT_EQ(RngFillLength(r, 1000, 0), 0u);
}

}  // namespace
}  // namespace dsec::devices
