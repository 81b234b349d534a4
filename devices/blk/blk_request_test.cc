// SPDX-License-Identifier: Apache-2.0
#include "devices/blk/blk_request.h"

#include <linux/virtio_blk.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::devices {
namespace {

using virtio::DescriptorChain;
using virtio::GuestBuffer;

// The wire constants match Linux's uapi header.
static_assert(kBlkTypeIn == VIRTIO_BLK_T_IN && kBlkTypeOut == VIRTIO_BLK_T_OUT);
static_assert(kBlkTypeFlush == VIRTIO_BLK_T_FLUSH && kBlkTypeGetId == VIRTIO_BLK_T_GET_ID);
static_assert(kBlkTypeDiscard == VIRTIO_BLK_T_DISCARD);
static_assert(kBlkTypeWriteZeroes == VIRTIO_BLK_T_WRITE_ZEROES);
static_assert(kBlkStatusIoErr == VIRTIO_BLK_S_IOERR && kBlkStatusUnsupp == VIRTIO_BLK_S_UNSUPP);
static_assert(sizeof(BlkRequestHeader) == sizeof(virtio_blk_outhdr));
static_assert(sizeof(BlkSegmentWire) == sizeof(virtio_blk_discard_write_zeroes));
static_assert(kBlkIdBytes == VIRTIO_BLK_ID_BYTES);

constexpr uint64_t kHeader = 0x1000;
constexpr uint64_t kData = 0x2000;
constexpr uint64_t kStatus = 0x9000;

class BlkRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    memory_ = memory::FakeGuestMemory::Create({{0, 0x10000}}).value();
    limits_.capacity_sectors = 100;
    limits_.seg_max = 4;
    limits_.discard = true;
    limits_.max_discard_sectors = 64;
    limits_.max_discard_seg = 2;
    limits_.write_zeroes = true;
    limits_.max_write_zeroes_sectors = 64;
    limits_.max_write_zeroes_seg = 2;
  }

  void WriteHeader(uint32_t type, uint64_t sector, uint64_t gpa = kHeader) {
    ASSERT_TRUE(memory_->WriteObj(gpa, BlkRequestHeader{type, 0, sector}).ok());
  }

  // header | data (readable for OUT) ... | status
  DescriptorChain ReadChain(uint64_t sector, uint32_t data_len) {
    WriteHeader(kBlkTypeIn, sector);
    return DescriptorChain{0, {{kHeader, 16}}, {{kData, data_len}, {kStatus, 1}}};
  }
  DescriptorChain WriteChain(uint64_t sector, uint32_t data_len) {
    WriteHeader(kBlkTypeOut, sector);
    return DescriptorChain{0, {{kHeader, 16}, {kData, data_len}}, {{kStatus, 1}}};
  }
  DescriptorChain SegmentChain(uint32_t type, const std::vector<BlkSegmentWire>& segs) {
    WriteHeader(type, 0);
    for (size_t i = 0; i < segs.size(); ++i) {
      EXPECT_TRUE(memory_->WriteObj(kData + 16 * i, segs[i]).ok());
    }
    return DescriptorChain{0, {{kHeader, 16}, {kData, static_cast<uint32_t>(16 * segs.size())}},
                           {{kStatus, 1}}};
  }

  BlkRequest Parse(const DescriptorChain& chain) {
    absl::StatusOr<BlkRequest> req = ParseBlkRequest(*memory_, chain, limits_);
    EXPECT_TRUE(req.ok()) << req.status();
    return req.ok() ? *req : BlkRequest{};
  }

  std::unique_ptr<memory::FakeGuestMemory> memory_;
  BlkLimits limits_;
};

TEST_F(BlkRequestTest, ParsesReadIntoWritableDataAndLocatesStatus) {
  BlkRequest req = Parse(ReadChain(7, 1024));
  EXPECT_EQ(req.type, BlkRequestType::kIn);
  EXPECT_EQ(req.status, kBlkStatusOk);
  EXPECT_EQ(req.sector, 7u);
  EXPECT_EQ(req.offset(), 7u * 512);
  EXPECT_EQ(req.data_len, 1024u);
  ASSERT_EQ(req.data.size(), 1u);
  EXPECT_EQ(req.data[0].gpa, kData);
  EXPECT_EQ(req.status_gpa, kStatus);
}

TEST_F(BlkRequestTest, StatusByteMaySharePlainDataDescriptor) {
  WriteHeader(kBlkTypeIn, 0);
  BlkRequest req = Parse(DescriptorChain{0, {{kHeader, 16}}, {{kData, 513}}});
  EXPECT_EQ(req.status, kBlkStatusOk);
  EXPECT_EQ(req.data_len, 512u);
  EXPECT_EQ(req.status_gpa, kData + 512);
}

TEST_F(BlkRequestTest, ParsesWriteWhoseDataFollowsHeaderInOneDescriptor) {
  WriteHeader(kBlkTypeOut, 3);
  BlkRequest req = Parse(DescriptorChain{0, {{kHeader, 16 + 512}}, {{kStatus, 1}}});
  EXPECT_EQ(req.type, BlkRequestType::kOut);
  EXPECT_EQ(req.status, kBlkStatusOk);
  ASSERT_EQ(req.data.size(), 1u);
  EXPECT_EQ(req.data[0].gpa, kHeader + 16);
  EXPECT_EQ(req.data[0].len, 512u);
}

TEST_F(BlkRequestTest, ReadsHeaderSplitAcrossDescriptors) {
  WriteHeader(kBlkTypeOut, 5);
  BlkRequest req =
      Parse(DescriptorChain{0, {{kHeader, 4}, {kHeader + 4, 12}, {kData, 512}}, {{kStatus, 1}}});
  EXPECT_EQ(req.status, kBlkStatusOk);
  EXPECT_EQ(req.sector, 5u);
  EXPECT_EQ(req.data_len, 512u);
}

TEST_F(BlkRequestTest, ShortHeaderIsIoErr) {
  WriteHeader(kBlkTypeIn, 0);
  BlkRequest req = Parse(DescriptorChain{0, {{kHeader, 15}}, {{kData, 512}, {kStatus, 1}}});
  EXPECT_EQ(req.status, kBlkStatusIoErr);
  EXPECT_EQ(req.status_gpa, kStatus);
  EXPECT_TRUE(req.data.empty());
}

TEST_F(BlkRequestTest, AcceptsIoEndingExactlyAtCapacity) {
  EXPECT_EQ(Parse(ReadChain(98, 1024)).status, kBlkStatusOk);
}

TEST_F(BlkRequestTest, SectorBeyondCapacityIsIoErr) {
  EXPECT_EQ(Parse(ReadChain(99, 1024)).status, kBlkStatusIoErr);
  EXPECT_EQ(Parse(WriteChain(100, 512)).status, kBlkStatusIoErr);
  EXPECT_EQ(Parse(ReadChain(101, 0)).status, kBlkStatusIoErr);
}

TEST_F(BlkRequestTest, OverflowingSectorIsIoErr) {
  limits_.capacity_sectors = std::numeric_limits<uint64_t>::max();
  // sector + sectors wraps around 2^64.
  EXPECT_EQ(Parse(ReadChain(std::numeric_limits<uint64_t>::max(), 1024)).status,
            kBlkStatusIoErr);
  limits_.capacity_sectors = 100;
  // sector * 512 would wrap to a small byte offset.
  EXPECT_EQ(Parse(WriteChain(1ull << 55, 512)).status, kBlkStatusIoErr);
}

TEST_F(BlkRequestTest, DataNotMultipleOfSectorIsIoErr) {
  EXPECT_EQ(Parse(ReadChain(0, 511)).status, kBlkStatusIoErr);
  EXPECT_EQ(Parse(WriteChain(0, 1000)).status, kBlkStatusIoErr);
}

TEST_F(BlkRequestTest, MoreDataBuffersThanSegMaxIsIoErr) {
  WriteHeader(kBlkTypeIn, 0);
  DescriptorChain chain{0, {{kHeader, 16}}, {}};
  for (int i = 0; i < 5; ++i) chain.writable.push_back({kData + 512u * i, 512});
  chain.writable.push_back({kStatus, 1});
  EXPECT_EQ(Parse(chain).status, kBlkStatusIoErr);
  chain.writable.erase(chain.writable.begin());
  EXPECT_EQ(Parse(chain).status, kBlkStatusOk);
}

TEST_F(BlkRequestTest, ChainWithoutWritableByteIsInvalid) {
  WriteHeader(kBlkTypeOut, 0);
  DescriptorChain chain{0, {{kHeader, 16}, {kData, 512}}, {}};
  absl::StatusOr<BlkRequest> req = ParseBlkRequest(*memory_, chain, limits_);
  EXPECT_EQ(req.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(BlkRequestTest, EmptyStatusBufferIsInvalid) {
  WriteHeader(kBlkTypeFlush, 0);
  DescriptorChain chain{0, {{kHeader, 16}}, {{kStatus, 0}}};
  absl::StatusOr<BlkRequest> req = ParseBlkRequest(*memory_, chain, limits_);
  EXPECT_EQ(req.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(BlkRequestTest, StatusIsLastByteOfLargerStatusBuffer) {
  WriteHeader(kBlkTypeOut, 0);
  BlkRequest req = Parse(DescriptorChain{0, {{kHeader, 16}, {kData, 512}}, {{kStatus, 4}}});
  EXPECT_EQ(req.status, kBlkStatusOk);
  EXPECT_EQ(req.status_gpa, kStatus + 3);
}

TEST_F(BlkRequestTest, StatusSkipsTrailingEmptyWritableBuffer) {
  WriteHeader(kBlkTypeFlush, 0);
  BlkRequest req = Parse(DescriptorChain{0, {{kHeader, 16}}, {{kStatus, 1}, {kData, 0}}});
  EXPECT_EQ(req.status, kBlkStatusOk);
  EXPECT_EQ(req.status_gpa, kStatus);
}

TEST_F(BlkRequestTest, UnknownTypesAreUnsupp) {
  for (uint32_t type : {2u, 3u, 10u, 14u, 0x80000001u}) {
    WriteHeader(type, 0);
    BlkRequest req = Parse(DescriptorChain{0, {{kHeader, 16}}, {{kStatus, 1}}});
    EXPECT_EQ(req.type, BlkRequestType::kUnsupported) << type;
    EXPECT_EQ(req.status, kBlkStatusUnsupp) << type;
    EXPECT_EQ(req.raw_type, type);
  }
}

TEST_F(BlkRequestTest, ReadOnlyDeviceRefusesWritesWithIoErr) {
  limits_.read_only = true;
  EXPECT_EQ(Parse(WriteChain(0, 512)).status, kBlkStatusIoErr);
  EXPECT_EQ(Parse(SegmentChain(kBlkTypeDiscard, {{0, 8, 0}})).status, kBlkStatusIoErr);
  EXPECT_EQ(Parse(SegmentChain(kBlkTypeWriteZeroes, {{0, 8, 0}})).status, kBlkStatusIoErr);
  EXPECT_EQ(Parse(ReadChain(0, 512)).status, kBlkStatusOk);
  WriteHeader(kBlkTypeFlush, 0);
  EXPECT_EQ(Parse(DescriptorChain{0, {{kHeader, 16}}, {{kStatus, 1}}}).status, kBlkStatusOk);
}

TEST_F(BlkRequestTest, ParsesDiscardAndWriteZeroesSegments) {
  BlkRequest discard = Parse(SegmentChain(kBlkTypeDiscard, {{0, 8, 0}, {90, 10, 0}}));
  EXPECT_EQ(discard.type, BlkRequestType::kDiscard);
  EXPECT_EQ(discard.status, kBlkStatusOk);
  ASSERT_EQ(discard.segments.size(), 2u);
  EXPECT_EQ(discard.segments[1].sector, 90u);
  EXPECT_EQ(discard.segments[1].num_sectors, 10u);

  BlkRequest zeroes = Parse(SegmentChain(kBlkTypeWriteZeroes, {{4, 4, kBlkSegmentFlagUnmap}}));
  EXPECT_EQ(zeroes.type, BlkRequestType::kWriteZeroes);
  EXPECT_EQ(zeroes.status, kBlkStatusOk);
  ASSERT_EQ(zeroes.segments.size(), 1u);
  EXPECT_TRUE(zeroes.segments[0].unmap);
}

TEST_F(BlkRequestTest, DiscardWithUnmapOrUnknownFlagIsUnsupp) {
  EXPECT_EQ(Parse(SegmentChain(kBlkTypeDiscard, {{0, 8, kBlkSegmentFlagUnmap}})).status,
            kBlkStatusUnsupp);
  EXPECT_EQ(Parse(SegmentChain(kBlkTypeWriteZeroes, {{0, 8, 2}})).status, kBlkStatusUnsupp);
}

TEST_F(BlkRequestTest, DiscardOrWriteZeroesNotNegotiatedIsUnsupp) {
  limits_.discard = false;
  limits_.write_zeroes = false;
  EXPECT_EQ(Parse(SegmentChain(kBlkTypeDiscard, {{0, 8, 0}})).status, kBlkStatusUnsupp);
  EXPECT_EQ(Parse(SegmentChain(kBlkTypeWriteZeroes, {{0, 8, 0}})).status, kBlkStatusUnsupp);
}

TEST_F(BlkRequestTest, SegmentsBreakingLimitsAreIoErr) {
  // More segments than max_discard_seg.
  EXPECT_EQ(Parse(SegmentChain(kBlkTypeDiscard, {{0, 1, 0}, {1, 1, 0}, {2, 1, 0}})).status,
            kBlkStatusIoErr);
  // More sectors than max_write_zeroes_sectors.
  EXPECT_EQ(Parse(SegmentChain(kBlkTypeWriteZeroes, {{0, 65, 0}})).status, kBlkStatusIoErr);
  // Beyond capacity, and wrapping.
  EXPECT_EQ(Parse(SegmentChain(kBlkTypeDiscard, {{96, 8, 0}})).status, kBlkStatusIoErr);
  EXPECT_EQ(Parse(SegmentChain(kBlkTypeDiscard, {{~0ull, 2, 0}})).status, kBlkStatusIoErr);
  // No segment at all.
  EXPECT_EQ(Parse(SegmentChain(kBlkTypeDiscard, {})).status, kBlkStatusIoErr);
}

TEST_F(BlkRequestTest, SegmentListNotMultipleOf16IsIoErr) {
  WriteHeader(kBlkTypeDiscard, 0);
  BlkRequest req = Parse(DescriptorChain{0, {{kHeader, 16}, {kData, 20}}, {{kStatus, 1}}});
  EXPECT_EQ(req.status, kBlkStatusIoErr);
}

TEST_F(BlkRequestTest, GetIdTakesAtMostTwentyBytes) {
  WriteHeader(kBlkTypeGetId, 0);
  BlkRequest req = Parse(DescriptorChain{0, {{kHeader, 16}}, {{kData, 512}, {kStatus, 1}}});
  EXPECT_EQ(req.type, BlkRequestType::kGetId);
  EXPECT_EQ(req.status, kBlkStatusOk);
  EXPECT_EQ(req.data_len, kBlkIdBytes);

  BlkRequest none = Parse(DescriptorChain{0, {{kHeader, 16}}, {{kStatus, 1}}});
  EXPECT_EQ(none.status, kBlkStatusIoErr);
}

TEST_F(BlkRequestTest, FlushNeedsOnlyHeaderAndStatus) {
  WriteHeader(kBlkTypeFlush, 0);
  BlkRequest req = Parse(DescriptorChain{0, {{kHeader, 16}}, {{kStatus, 1}}});
  EXPECT_EQ(req.type, BlkRequestType::kFlush);
  EXPECT_EQ(req.status, kBlkStatusOk);
}

TEST(GuestRangesToIovecsTest, SplitsRangeAtRegionBoundary) {
  auto memory = memory::FakeGuestMemory::Create({{0, 0x10000}, {0x10000, 0x10000}}).value();
  absl::StatusOr<std::vector<iovec>> iov =
      GuestRangesToIovecs(*memory, std::vector<GuestBuffer>{{0xff00, 0x200}});
  ASSERT_TRUE(iov.ok()) << iov.status();
  ASSERT_EQ(iov->size(), 2u);
  EXPECT_EQ((*iov)[0].iov_len, 0x100u);
  EXPECT_EQ((*iov)[1].iov_len, 0x100u);
  EXPECT_EQ((*iov)[0].iov_base, *memory->HostAddress(0xff00, 0x100));
  EXPECT_EQ((*iov)[1].iov_base, *memory->HostAddress(0x10000, 0x100));
}

TEST(GuestRangesToIovecsTest, RefusesRangeOutsideRam) {
  auto memory = memory::FakeGuestMemory::Create({{0, 0x10000}}).value();
  EXPECT_FALSE(GuestRangesToIovecs(*memory, std::vector<GuestBuffer>{{0xff00, 0x200}}).ok());
}

}  // namespace
}  // namespace dsec::devices
