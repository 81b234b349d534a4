// SPDX-License-Identifier: Apache-2.0
#include "devices/vsock/vsock_packet.h"

#include <cstring>

#include "gtest/gtest.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::devices {
namespace {

constexpr uint64_t kGuestCid = 3;

VsockHeader GuestHeader(VsockOp op, uint32_t len = 0) {
  VsockHeader h;
  h.src_cid = kGuestCid;
  h.dst_cid = kVsockHostCid;
  h.src_port = 1024;
  h.dst_port = 52;
  h.len = len;
  h.type = kVsockTypeStream;
  h.op = op;
  h.buf_alloc = 4096;
  h.fwd_cnt = 7;
  return h;
}

class VsockPacketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mem = memory::FakeGuestMemory::Create({{0, 0x10000}});
    ASSERT_TRUE(mem.ok());
    mem_ = std::move(*mem);
  }
  // Puts header + payload at 0x1000 and returns a chain of one readable
  // buffer of `extra` bytes beyond what was written (may be negative).
  virtio::DescriptorChain Put(const VsockHeader& h, std::span<const uint8_t> payload,
                              int64_t extra = 0) {
    VsockWireHeader w = EncodeVsockHeader(h);
    EXPECT_TRUE(mem_->WriteObj(0x1000, w).ok());
    EXPECT_TRUE(mem_->Write(0x1000 + kVsockHeaderSize, payload).ok());
    return virtio::DescriptorChain{
        0, {{0x1000, static_cast<uint32_t>(kVsockHeaderSize + payload.size() + extra)}}, {}};
  }
  std::unique_ptr<memory::FakeGuestMemory> mem_;
};

TEST_F(VsockPacketTest, WireHeaderIsLittleEndianAtSpecOffsets) {
  VsockHeader h = GuestHeader(VsockOp::kRw, 5);
  VsockWireHeader w = EncodeVsockHeader(h);
  uint8_t raw[kVsockHeaderSize];
  std::memcpy(raw, &w, sizeof(raw));
  EXPECT_EQ(raw[0], 3);              // src_cid
  EXPECT_EQ(raw[8], 2);              // dst_cid
  EXPECT_EQ(raw[16], 1024 & 0xff);   // src_port
  EXPECT_EQ(raw[17], 1024 >> 8);
  EXPECT_EQ(raw[20], 52);            // dst_port
  EXPECT_EQ(raw[24], 5);             // len
  EXPECT_EQ(raw[28], 1);             // type
  EXPECT_EQ(raw[30], 5);             // op
  EXPECT_EQ(raw[36] | raw[37] << 8, 4096);  // buf_alloc
  EXPECT_EQ(raw[40], 7);             // fwd_cnt
  EXPECT_EQ(DecodeVsockHeader(w), h);
}

TEST_F(VsockPacketTest, ParsesRwPacketSplitAcrossBuffers) {
  const uint8_t payload[] = {'h', 'e', 'l', 'l', 'o'};
  Put(GuestHeader(VsockOp::kRw, 5), payload);
  // Header split at byte 10, payload in a third buffer boundary.
  virtio::DescriptorChain chain{
      0, {{0x1000, 10}, {0x100a, kVsockHeaderSize - 10 + 2}, {0x1000 + kVsockHeaderSize + 2, 3}},
      {}};
  VsockTxParse r = ParseTxChain(*mem_, chain, kGuestCid);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_TRUE(r.header_read);
  EXPECT_EQ(r.packet.hdr.op, VsockOp::kRw);
  EXPECT_EQ(r.packet.payload, std::vector<uint8_t>(payload, payload + 5));
}

TEST_F(VsockPacketTest, RejectsChainShorterThanHeader) {
  virtio::DescriptorChain chain{0, {{0x1000, kVsockHeaderSize - 1}}, {}};
  VsockTxParse r = ParseTxChain(*mem_, chain, kGuestCid);
  EXPECT_FALSE(r.status.ok());
  EXPECT_FALSE(r.header_read);
}

TEST_F(VsockPacketTest, RejectsLenBeyondPayloadPresent) {
  const uint8_t payload[4] = {};
  auto chain = Put(GuestHeader(VsockOp::kRw, 5), payload);
  VsockTxParse r = ParseTxChain(*mem_, chain, kGuestCid);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(r.header_read);
  EXPECT_TRUE(r.packet.payload.empty());
}

TEST_F(VsockPacketTest, RejectsLenAboveMaxPacketSize) {
  VsockHeader h = GuestHeader(VsockOp::kRw, kVsockMaxPayload + 1);
  EXPECT_FALSE(ValidateTxHeader(h, kGuestCid, 1 << 20).ok());
  h.len = kVsockMaxPayload;
  EXPECT_TRUE(ValidateTxHeader(h, kGuestCid, 1 << 20).ok());
}

TEST_F(VsockPacketTest, RejectsWrongCidsTypeAndUnknownOps) {
  VsockHeader h = GuestHeader(VsockOp::kRequest);
  EXPECT_TRUE(ValidateTxHeader(h, kGuestCid, 0).ok());
  VsockHeader spoofed = h;
  spoofed.src_cid = 4;
  EXPECT_FALSE(ValidateTxHeader(spoofed, kGuestCid, 0).ok());
  VsockHeader elsewhere = h;
  elsewhere.dst_cid = 5;
  EXPECT_FALSE(ValidateTxHeader(elsewhere, kGuestCid, 0).ok());
  VsockHeader seqpacket = h;
  seqpacket.type = 2;
  EXPECT_FALSE(ValidateTxHeader(seqpacket, kGuestCid, 0).ok());
  for (uint16_t op : {0, 8, 0xffff}) {
    VsockHeader bad = h;
    bad.op = static_cast<VsockOp>(op);
    EXPECT_FALSE(ValidateTxHeader(bad, kGuestCid, 0).ok()) << op;
  }
}

TEST_F(VsockPacketTest, RejectsPayloadOnControlOps) {
  VsockHeader h = GuestHeader(VsockOp::kShutdown, 1);
  EXPECT_FALSE(ValidateTxHeader(h, kGuestCid, 1).ok());
}

TEST_F(VsockPacketTest, IgnoresTrailingBytesBeyondLen) {
  const uint8_t payload[3] = {1, 2, 3};
  auto chain = Put(GuestHeader(VsockOp::kRw, 3), payload, /*extra=*/100);
  VsockTxParse r = ParseTxChain(*mem_, chain, kGuestCid);
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.packet.payload.size(), 3u);
}

TEST_F(VsockPacketTest, WritesRxPacketAndReportsLength) {
  VsockHeader h;
  h.src_cid = kVsockHostCid;
  h.dst_cid = kGuestCid;
  h.op = VsockOp::kRw;
  const uint8_t payload[] = {9, 8, 7};
  virtio::DescriptorChain chain{0, {}, {{0x2000, 20}, {0x3000, 100}}};
  auto n = WriteRxChain(*mem_, chain, h, payload);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, kVsockHeaderSize + 3);
  // Read it back through the tx parser (swapping cids to pass validation).
  std::vector<uint8_t> bytes(*n);
  ASSERT_TRUE(mem_->Read(0x2000, std::span(bytes).subspan(0, 20)).ok());
  ASSERT_TRUE(mem_->Read(0x3000, std::span(bytes).subspan(20)).ok());
  VsockWireHeader w;
  std::memcpy(&w, bytes.data(), sizeof(w));
  EXPECT_EQ(w.len, 3u);
  EXPECT_EQ(w.dst_cid, kGuestCid);
  EXPECT_EQ(bytes[kVsockHeaderSize + 2], 7);
}

TEST_F(VsockPacketTest, RefusesRxChainTooSmallWithoutWriting) {
  VsockHeader h;
  h.op = VsockOp::kRw;
  const uint8_t payload[10] = {};
  ASSERT_TRUE(mem_->Fill(0x2000, 0xaa, 64).ok());
  virtio::DescriptorChain chain{0, {}, {{0x2000, kVsockHeaderSize + 9}}};
  EXPECT_FALSE(WriteRxChain(*mem_, chain, h, payload).ok());
  EXPECT_EQ(*mem_->ReadObj<uint8_t>(0x2000), 0xaa);
}

}  // namespace
}  // namespace dsec::devices
