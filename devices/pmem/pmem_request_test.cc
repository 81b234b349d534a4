// SPDX-License-Identifier: Apache-2.0
#include "devices/pmem/pmem_request.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::devices {
namespace {

class PmemRequestTest : public ::testing::Test {
 protected:
  void SetUp() override { mem_ = memory::FakeGuestMemory::Create({{0, 1 << 16}}).value(); }
  void Put32(uint64_t gpa, uint32_t v) {
    ASSERT_TRUE(mem_->Write(gpa, std::span<const uint8_t>(reinterpret_cast<uint8_t*>(&v), 4)).ok());
  }
  std::unique_ptr<memory::FakeGuestMemory> mem_;
};

TEST_F(PmemRequestTest, ParsesFlush) {
  Put32(0x100, kPmemReqTypeFlush);
  virtio::DescriptorChain chain{0, {{0x100, 4}}, {{0x200, 4}}};
  auto r = ParsePmemRequest(*mem_, chain);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->type, kPmemReqTypeFlush);
}

TEST_F(PmemRequestTest, ParsesUnknownTypeForTheDeviceToRefuse) {
  Put32(0x100, 7);
  virtio::DescriptorChain chain{0, {{0x100, 4}}, {{0x200, 4}}};
  auto r = ParsePmemRequest(*mem_, chain);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->type, 7u);
}

TEST_F(PmemRequestTest, ReadsTypeSplitAcrossBuffers) {
  Put32(0x100, 0x04030201);
  virtio::DescriptorChain chain{0, {{0x100, 1}, {0x101, 3}}, {{0x200, 4}}};
  auto r = ParsePmemRequest(*mem_, chain);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->type, 0x04030201u);
}

TEST_F(PmemRequestTest, RejectsShortRequest) {
  virtio::DescriptorChain chain{0, {{0x100, 3}}, {{0x200, 4}}};
  EXPECT_EQ(ParsePmemRequest(*mem_, chain).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PmemRequestTest, RejectsMissingResponseSpace) {
  virtio::DescriptorChain chain{0, {{0x100, 4}}, {{0x200, 2}}};
  EXPECT_FALSE(ParsePmemRequest(*mem_, chain).ok());
  virtio::DescriptorChain no_resp{0, {{0x100, 4}}, {}};
  EXPECT_FALSE(ParsePmemRequest(*mem_, no_resp).ok());
}

TEST(PmemConfigTest, LaysOutStartAndSizeLittleEndian) {
  uint8_t buf[16];
  ReadPmemConfig(0x1'2000'0000, 0x800'0000, 0, buf);
  uint64_t start, size;
  std::memcpy(&start, buf, 8);
  std::memcpy(&size, buf + 8, 8);
  EXPECT_EQ(start, 0x1'2000'0000u);
  EXPECT_EQ(size, 0x800'0000u);
  uint8_t hi[4];
  ReadPmemConfig(0x1'2000'0000, 0x800'0000, 4, hi);
  uint32_t v;
  std::memcpy(&v, hi, 4);
  EXPECT_EQ(v, 1u);
}

TEST(PmemConfigTest, ReadsZerosBeyondTheStructAndNearWrap) {
  uint8_t buf[8];
  std::memset(buf, 0xaa, sizeof(buf));
  ReadPmemConfig(1, 2, 16, buf);
  EXPECT_EQ(std::vector<uint8_t>(buf, buf + 8), std::vector<uint8_t>(8, 0));
  std::memset(buf, 0xaa, sizeof(buf));
  ReadPmemConfig(1, 2, UINT64_MAX - 3, buf);
  EXPECT_EQ(std::vector<uint8_t>(buf, buf + 8), std::vector<uint8_t>(8, 0));
}

}  // namespace
}  // namespace dsec::devices
