// SPDX-License-Identifier: Apache-2.0
#include "devices/virtio/descriptor_chain.h"

#include "gtest/gtest.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::virtio {
namespace {

class DescriptorChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mem = memory::FakeGuestMemory::Create({{0, 0x10000}});
    ASSERT_TRUE(mem.ok());
    mem_ = std::move(*mem);
  }
  std::unique_ptr<memory::FakeGuestMemory> mem_;
};

TEST_F(DescriptorChainTest, ReadsAcrossBuffersAndRefusesShortReads) {
  uint8_t a[3] = {1, 2, 3}, b[4] = {4, 5, 6, 7};
  ASSERT_TRUE(mem_->Write(0x100, a).ok());
  ASSERT_TRUE(mem_->Write(0x200, b).ok());
  DescriptorChain chain{0, {{0x100, 3}, {0x300, 0}, {0x200, 4}}, {}};
  EXPECT_EQ(chain.ReadableBytes(), 7u);
  ChainReader r(*mem_, chain);
  uint8_t out[5] = {};
  ASSERT_TRUE(r.Read(out).ok());
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[4], 5);
  EXPECT_EQ(r.Remaining(), 2u);
  uint8_t big[3];
  EXPECT_FALSE(r.Read(big).ok());
  EXPECT_EQ(r.Remaining(), 2u);  // a failed read consumes nothing
  auto v = r.ReadObj<uint16_t>();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 6 | (7 << 8));
  EXPECT_EQ(r.Remaining(), 0u);
}

TEST_F(DescriptorChainTest, WriterCountsWrittenBytesAndRefusesOverflow) {
  DescriptorChain chain{0, {}, {{0x400, 2}, {0x500, 6}}};
  ChainWriter w(*mem_, chain);
  uint8_t data[5] = {9, 8, 7, 6, 5};
  ASSERT_TRUE(w.Write(data).ok());
  EXPECT_EQ(w.written(), 5u);
  EXPECT_EQ(*mem_->ReadObj<uint8_t>(0x401), 8);
  EXPECT_EQ(*mem_->ReadObj<uint8_t>(0x502), 5);
  uint8_t more[4] = {};
  EXPECT_FALSE(w.Write(more).ok());
  EXPECT_EQ(w.written(), 5u);
}

TEST_F(DescriptorChainTest, WriterWritesNothingWhenAnyRangeIsOutsideMemory) {
  DescriptorChain chain{0, {}, {{0x600, 2}, {0x20000, 4}}};
  ChainWriter w(*mem_, chain);
  uint8_t data[4] = {1, 1, 1, 1};
  EXPECT_FALSE(w.Write(data).ok());
  EXPECT_EQ(*mem_->ReadObj<uint8_t>(0x600), 0);
}

TEST_F(DescriptorChainTest, TakeRangesSplitsAtBufferBoundaries) {
  DescriptorChain chain{0, {{0x100, 4}, {0x200, 4}}, {}};
  ChainReader r(*mem_, chain);
  ASSERT_TRUE(r.Skip(2).ok());
  auto ranges = r.TakeRanges(5);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].gpa, 0x102u);
  EXPECT_EQ(ranges[0].len, 2u);
  EXPECT_EQ(ranges[1].gpa, 0x200u);
  EXPECT_EQ(ranges[1].len, 3u);
  EXPECT_EQ(r.Remaining(), 1u);
}

}  // namespace
}  // namespace dsec::virtio

namespace dsec::virtio {
namespace {

// Zero-length buffers anywhere in a chain (first, middle, last) are stepped
// over without reading past the end of the buffer list (found by fuzzing).
TEST(DescriptorChainEmptyBuffers, LeadingMiddleAndTrailingEmptyBuffersAreSkipped) {
  auto mem_or = memory::FakeGuestMemory::Create({{0, 0x1000}});
  ASSERT_TRUE(mem_or.ok());
  auto& mem = **mem_or;
  uint8_t data[4] = {1, 2, 3, 4};
  ASSERT_TRUE(mem.Write(0x100, data).ok());
  DescriptorChain chain{0, {{0x0, 0}, {0x100, 2}, {0x0, 0}, {0x102, 2}, {0x0, 0}},
                        {{0x0, 0}, {0x200, 4}, {0x0, 0}}};
  ChainReader r(mem, chain);
  uint8_t out[4] = {};
  ASSERT_TRUE(r.Read(out).ok());
  EXPECT_EQ(out[3], 4);
  EXPECT_EQ(r.Remaining(), 0u);
  uint8_t one[1];
  EXPECT_FALSE(r.Read(one).ok());
  ChainReader r2(mem, chain);
  auto ranges = r2.TakeRanges(100);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[1].gpa, 0x102u);
  ChainWriter w(mem, chain);
  ASSERT_TRUE(w.Write(out).ok());
  EXPECT_EQ(w.written(), 4u);
  EXPECT_EQ(*mem.ReadObj<uint8_t>(0x203), 4);
  EXPECT_FALSE(w.Write(one).ok());
}

}  // namespace
}  // namespace dsec::virtio
