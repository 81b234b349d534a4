// SPDX-License-Identifier: Apache-2.0
#include "devices/balloon/balloon_request.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::devices {
namespace {

class BalloonRequestTest : public ::testing::Test {
 protected:
  void SetUp() override { mem_ = memory::FakeGuestMemory::Create({{0, 1 << 16}}).value(); }

  // A chain with one readable buffer at 0x1000 holding `bytes`.
  virtio::DescriptorChain Readable(const std::vector<uint8_t>& bytes) {
    EXPECT_TRUE(mem_->Write(0x1000, bytes).ok());
    virtio::DescriptorChain chain;
    chain.readable.push_back({0x1000, static_cast<uint32_t>(bytes.size())});
    return chain;
  }
  template <typename T>
  static std::vector<uint8_t> Bytes(const std::vector<T>& v) {
    std::vector<uint8_t> out(v.size() * sizeof(T));
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }

  std::unique_ptr<memory::FakeGuestMemory> mem_;
};

TEST_F(BalloonRequestTest, ParsesLe32PfnArray) {
  auto pfns = ParsePfnRequest(Readable(Bytes<uint32_t>({7, 3, 0xffffffff})), *mem_, 16);
  ASSERT_TRUE(pfns.ok()) << pfns.status();
  EXPECT_EQ(*pfns, (std::vector<uint32_t>{7, 3, 0xffffffff}));
}

TEST_F(BalloonRequestTest, RejectsMalformedPfnBuffers) {
  EXPECT_FALSE(ParsePfnRequest(Readable({1, 2, 3}), *mem_, 16).ok());  // not le32 aligned
  EXPECT_FALSE(ParsePfnRequest(Readable(Bytes<uint32_t>({1, 2, 3})), *mem_, 2).ok());  // too many
  virtio::DescriptorChain empty;
  EXPECT_FALSE(ParsePfnRequest(empty, *mem_, 16).ok());
  virtio::DescriptorChain writable = Readable(Bytes<uint32_t>({1}));
  writable.writable.push_back({0x2000, 4});
  EXPECT_FALSE(ParsePfnRequest(writable, *mem_, 16).ok());
}

TEST_F(BalloonRequestTest, ParsesStatsAndIgnoresUnknownTags) {
  std::vector<BalloonStatEntry> entries = {
      {static_cast<uint16_t>(BalloonStatTag::kFreeMemory), 100 << 20},
      {static_cast<uint16_t>(BalloonStatTag::kMajorFaults), 5},
      {77, 1},
      {static_cast<uint16_t>(BalloonStatTag::kFreeMemory), 90 << 20}};  // later wins
  auto stats = ParseStatsRequest(Readable(Bytes(entries)), *mem_, 16);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_TRUE(stats->Has(BalloonStatTag::kFreeMemory));
  EXPECT_EQ(stats->Get(BalloonStatTag::kFreeMemory), 90u << 20);
  EXPECT_EQ(stats->Get(BalloonStatTag::kMajorFaults), 5u);
  EXPECT_FALSE(stats->Has(BalloonStatTag::kTotalMemory));
  EXPECT_EQ(stats->unknown_tags, 1u);
}

TEST_F(BalloonRequestTest, RejectsPartialOrOversizedStats) {
  EXPECT_FALSE(ParseStatsRequest(Readable(std::vector<uint8_t>(15, 0)), *mem_, 16).ok());
  EXPECT_FALSE(ParseStatsRequest(Readable(std::vector<uint8_t>(30, 0)), *mem_, 2).ok());
  EXPECT_TRUE(ParseStatsRequest(Readable(std::vector<uint8_t>(20, 0)), *mem_, 2).ok());
}

TEST_F(BalloonRequestTest, ReportTakesEveryBufferAsARange) {
  virtio::DescriptorChain chain;
  chain.writable.push_back({0x4000, 0x2000});
  chain.readable.push_back({0x8000, 0x1000});
  auto ranges = ParseReportRequest(chain, 4);
  ASSERT_TRUE(ranges.ok());
  ASSERT_EQ(ranges->size(), 2u);
  EXPECT_FALSE(ParseReportRequest(chain, 1).ok());
  EXPECT_FALSE(ParseReportRequest(virtio::DescriptorChain{}, 4).ok());
}

TEST(CoalesceTest, PfnsBecomeSortedRunsAndDuplicatesAreCounted) {
  CoalescedPfns co = CoalescePfns({12, 10, 11, 20, 11, 21, 10});
  ASSERT_EQ(co.runs.size(), 2u);
  EXPECT_EQ(co.runs[0].first_pfn, 10u);
  EXPECT_EQ(co.runs[0].count, 3u);
  EXPECT_EQ(co.runs[1].first_pfn, 20u);
  EXPECT_EQ(co.runs[1].count, 2u);
  EXPECT_EQ(co.duplicates, 2u);
}

TEST(CoalesceTest, OverlappingRangesMergeAndCountOverlap) {
  CoalescedRanges co = CoalesceRanges({{0x10000, 0x4000}, {0x12000, 0x4000}, {0x16000, 0x1000},
                                       {0x30000, 0x1000}, {0x30000, 0x800}});
  ASSERT_EQ(co.runs.size(), 2u);
  EXPECT_EQ(co.runs[0].first_pfn, 0x10u);
  EXPECT_EQ(co.runs[0].count, 7u);
  EXPECT_EQ(co.runs[1].first_pfn, 0x30u);
  EXPECT_EQ(co.duplicate_pages, 2u);  // 0x12000..0x14000 twice; the half page holds none
}

}  // namespace
}  // namespace dsec::devices
