// SPDX-License-Identifier: Apache-2.0
#include "devices/net/net_request.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::devices {
namespace {

constexpr NetOffloads kAllOffloads{.csum = true, .tso4 = true, .tso6 = true};

VirtioNetHdr PlainHdr() { return VirtioNetHdr{}; }

VirtioNetHdr Tso4Hdr() {
  VirtioNetHdr h;
  h.flags = kNetHdrFNeedsCsum;
  h.gso_type = kNetHdrGsoTcpV4;
  h.hdr_len = 54;
  h.gso_size = 1448;
  h.csum_start = 34;
  h.csum_offset = 16;
  return h;
}

TEST(ValidateTxHeaderTest, AcceptsPlainFrameOfEthernetHeaderSize) {
  EXPECT_TRUE(ValidateTxHeader(PlainHdr(), kMinFrameLen, TxPolicy{}).ok());
}

TEST(ValidateTxHeaderTest, RejectsFrameShorterThanEthernetHeader) {
  EXPECT_EQ(ValidateTxHeader(PlainHdr(), kMinFrameLen - 1, TxPolicy{}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ValidateTxHeaderTest, RejectsFrameLongerThanMaximum) {
  TxPolicy policy{.offloads = kAllOffloads};
  EXPECT_TRUE(ValidateTxHeader(Tso4Hdr(), kMaxFrameLen, policy).ok());
  EXPECT_FALSE(ValidateTxHeader(Tso4Hdr(), kMaxFrameLen + 1, policy).ok());
}

TEST(ValidateTxHeaderTest, RejectsPlainFrameAboveMtu) {
  TxPolicy policy{.offloads = {}, .max_plain_frame_len = 1500 + kMaxL2HeaderLen};
  EXPECT_TRUE(ValidateTxHeader(PlainHdr(), 1518, policy).ok());
  EXPECT_FALSE(ValidateTxHeader(PlainHdr(), 1519, policy).ok());
}

TEST(ValidateTxHeaderTest, RejectsNeedsCsumWithoutCsumFeature) {
  VirtioNetHdr h;
  h.flags = kNetHdrFNeedsCsum;
  h.csum_start = 34;
  h.csum_offset = 6;
  EXPECT_FALSE(ValidateTxHeader(h, 100, TxPolicy{}).ok());
  EXPECT_TRUE(ValidateTxHeader(h, 100, TxPolicy{.offloads = {.csum = true}}).ok());
}

TEST(ValidateTxHeaderTest, RejectsChecksumFieldOutsideFrame) {
  VirtioNetHdr h;
  h.flags = kNetHdrFNeedsCsum;
  h.csum_start = 90;
  h.csum_offset = 8;  // checksum at 98..99: fits a 100-byte frame exactly
  TxPolicy policy{.offloads = {.csum = true}};
  EXPECT_TRUE(ValidateTxHeader(h, 100, policy).ok());
  h.csum_offset = 9;
  EXPECT_FALSE(ValidateTxHeader(h, 100, policy).ok());
  h.csum_start = 0xffff;
  h.csum_offset = 0xffff;  // no 16-bit wrap-around
  EXPECT_FALSE(ValidateTxHeader(h, 100, policy).ok());
}

TEST(ValidateTxHeaderTest, RejectsDataValidAndRscInfoOnTransmit) {
  VirtioNetHdr h;
  h.flags = kNetHdrFDataValid;
  EXPECT_FALSE(ValidateTxHeader(h, 60, TxPolicy{.offloads = kAllOffloads}).ok());
  h.flags = kNetHdrFRscInfo;
  EXPECT_FALSE(ValidateTxHeader(h, 60, TxPolicy{.offloads = kAllOffloads}).ok());
}

TEST(ValidateTxHeaderTest, AcceptsTsoOnlyWhenNegotiated) {
  VirtioNetHdr h = Tso4Hdr();
  EXPECT_TRUE(ValidateTxHeader(h, 3000, TxPolicy{.offloads = kAllOffloads}).ok());
  EXPECT_FALSE(ValidateTxHeader(h, 3000, TxPolicy{.offloads = {.csum = true, .tso6 = true}}).ok());
  h.gso_type = kNetHdrGsoTcpV6;
  EXPECT_TRUE(ValidateTxHeader(h, 3000, TxPolicy{.offloads = {.csum = true, .tso6 = true}}).ok());
  EXPECT_FALSE(ValidateTxHeader(h, 3000, TxPolicy{.offloads = {.csum = true, .tso4 = true}}).ok());
}

TEST(ValidateTxHeaderTest, RejectsUfoEcnAndUnknownGsoTypes) {
  TxPolicy policy{.offloads = kAllOffloads};
  VirtioNetHdr h = Tso4Hdr();
  h.gso_type = kNetHdrGsoUdp;
  EXPECT_FALSE(ValidateTxHeader(h, 3000, policy).ok());
  h.gso_type = kNetHdrGsoTcpV4 | kNetHdrGsoEcn;
  EXPECT_FALSE(ValidateTxHeader(h, 3000, policy).ok());
  h.gso_type = 2;
  EXPECT_FALSE(ValidateTxHeader(h, 3000, policy).ok());
}

TEST(ValidateTxHeaderTest, RejectsGsoWithoutNeedsCsumOrMss) {
  TxPolicy policy{.offloads = kAllOffloads};
  VirtioNetHdr h = Tso4Hdr();
  h.flags = 0;
  EXPECT_FALSE(ValidateTxHeader(h, 3000, policy).ok());
  h = Tso4Hdr();
  h.gso_size = 0;
  EXPECT_FALSE(ValidateTxHeader(h, 3000, policy).ok());
}

TEST(ValidateTxHeaderTest, RejectsHdrLenBeyondFrame) {
  TxPolicy policy{.offloads = kAllOffloads};
  VirtioNetHdr h = Tso4Hdr();
  h.hdr_len = 3001;
  EXPECT_FALSE(ValidateTxHeader(h, 3000, policy).ok());
  VirtioNetHdr plain;
  plain.hdr_len = 61;
  EXPECT_FALSE(ValidateTxHeader(plain, 60, policy).ok());
}

class ParseTxChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mem = memory::FakeGuestMemory::Create({{0, 0x40000}});
    ASSERT_TRUE(mem.ok());
    mem_ = std::move(*mem);
  }
  void Put(uint64_t gpa, const void* data, size_t len) {
    auto bytes = std::span<const uint8_t>(static_cast<const uint8_t*>(data), len);
    ASSERT_TRUE(mem_->Write(gpa, bytes).ok());
  }
  std::unique_ptr<memory::FakeGuestMemory> mem_;
};

TEST_F(ParseTxChainTest, SplitsHeaderAndFrameAcrossDescriptors) {
  VirtioNetHdr h = PlainHdr();
  h.num_buffers = 7;  // ignored on transmit
  // The header straddles two descriptors, the frame starts mid-descriptor.
  Put(0x1000, &h, 5);
  Put(0x2000, reinterpret_cast<uint8_t*>(&h) + 5, 7);
  std::vector<uint8_t> frame(60, 0xab);
  Put(0x2007, frame.data(), 20);
  Put(0x3000, frame.data() + 20, 40);
  virtio::DescriptorChain chain{3, {{0x1000, 5}, {0x2000, 27}, {0x3000, 40}}, {}};
  auto tx = ParseTxChain(*mem_, chain, TxPolicy{});
  ASSERT_TRUE(tx.ok()) << tx.status();
  EXPECT_EQ(tx->frame_len, 60u);
  EXPECT_EQ(tx->hdr.num_buffers, 0);
  ASSERT_EQ(tx->frame.size(), 2u);
  EXPECT_EQ(tx->frame[0].gpa, 0x2007u);
  EXPECT_EQ(tx->frame[0].len, 20u);
  EXPECT_EQ(tx->frame[1].gpa, 0x3000u);
  EXPECT_EQ(tx->frame[1].len, 40u);
}

TEST_F(ParseTxChainTest, RejectsChainShorterThanHeader) {
  virtio::DescriptorChain chain{0, {{0x1000, 11}}, {}};
  EXPECT_EQ(ParseTxChain(*mem_, chain, TxPolicy{}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ParseTxChainTest, RejectsChainWithWritableBuffers) {
  virtio::DescriptorChain chain{0, {{0x1000, 100}}, {{0x2000, 10}}};
  EXPECT_FALSE(ParseTxChain(*mem_, chain, TxPolicy{}).ok());
}

TEST_F(ParseTxChainTest, RejectsChainLongerThanMaximumFrame) {
  // Guest-controlled lengths add up past 64 KiB + header without wrapping.
  virtio::DescriptorChain chain{0, {{0x0, 0x20000}, {0x20000, 0x20000}}, {}};
  EXPECT_FALSE(ParseTxChain(*mem_, chain, TxPolicy{.offloads = kAllOffloads}).ok());
}

TEST_F(ParseTxChainTest, ValidatesTheCopiedHeader) {
  VirtioNetHdr h = Tso4Hdr();
  Put(0x1000, &h, sizeof(h));
  virtio::DescriptorChain chain{0, {{0x1000, 12 + 3000}}, {}};
  EXPECT_FALSE(ParseTxChain(*mem_, chain, TxPolicy{}).ok());
  auto tx = ParseTxChain(*mem_, chain, TxPolicy{.offloads = kAllOffloads});
  ASSERT_TRUE(tx.ok()) << tx.status();
  EXPECT_EQ(tx->hdr.gso_size, 1448);
}

TEST(BuildRxHeaderTest, SetsNumBuffersToOneAndClearsFlagsWithoutGuestCsum) {
  VirtioNetHdr backend;
  backend.flags = kNetHdrFDataValid;
  backend.num_buffers = 0x5555;  // tap leaves these bytes untouched
  auto h = BuildRxHeader(backend, 60, NetOffloads{});
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->num_buffers, 1);
  EXPECT_EQ(h->flags, 0);
}

TEST(BuildRxHeaderTest, KeepsDataValidWithGuestCsum) {
  VirtioNetHdr backend;
  backend.flags = kNetHdrFDataValid;
  auto h = BuildRxHeader(backend, 60, NetOffloads{.csum = true});
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->flags, kNetHdrFDataValid);
}

TEST(BuildRxHeaderTest, RefusesPartialChecksumWithoutGuestCsum) {
  VirtioNetHdr backend;
  backend.flags = kNetHdrFNeedsCsum;
  backend.csum_start = 34;
  backend.csum_offset = 6;
  EXPECT_FALSE(BuildRxHeader(backend, 60, NetOffloads{}).ok());
  EXPECT_TRUE(BuildRxHeader(backend, 60, NetOffloads{.csum = true}).ok());
}

TEST(BuildRxHeaderTest, RefusesGsoTheGuestDidNotNegotiate) {
  EXPECT_FALSE(BuildRxHeader(Tso4Hdr(), 3000, NetOffloads{.csum = true}).ok());
  auto h = BuildRxHeader(Tso4Hdr(), 3000, NetOffloads{.csum = true, .tso4 = true});
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->gso_type, kNetHdrGsoTcpV4);
  EXPECT_EQ(h->gso_size, 1448);
}

TEST(BuildRxHeaderTest, RefusesRuntAndOversizedFrames) {
  EXPECT_FALSE(BuildRxHeader(PlainHdr(), 13, kAllOffloads).ok());
  EXPECT_FALSE(BuildRxHeader(PlainHdr(), kMaxFrameLen + 1, kAllOffloads).ok());
}

}  // namespace
}  // namespace dsec::devices
