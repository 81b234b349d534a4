// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "platform/arch/x86_64/kernel_loader.h"
#include "platform/arch/x86_64/test_images.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::arch {
namespace {

using testing::BuildBzImage;
using testing::BzOptions;

class BzImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = memory::FakeGuestMemory::Create({{0, 64 * kMiB}});
    ASSERT_TRUE(m.ok());
    mem_ = std::move(*m);
  }
  absl::StatusCode Code(const std::vector<uint8_t>& img) {
    return ParseKernel(img, *mem_).status().code();
  }
  std::unique_ptr<memory::FakeGuestMemory> mem_;
};

TEST_F(BzImageTest, LoadsProtectedModeCodeAtOneMiB) {
  BzOptions o;
  o.setup_sects = 3;
  auto img = BuildBzImage(o);
  auto k = ParseKernel(img, *mem_);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->format, KernelFormat::kBzImage);
  ASSERT_EQ(k->segments.size(), 1u);
  EXPECT_EQ(k->segments[0].file_offset, 4u * 512);
  EXPECT_EQ(k->segments[0].gpa, 0x100000u);
  EXPECT_EQ(k->entry64, 0x100200u);
  EXPECT_EQ(k->protocol_version, 0x020f);
  EXPECT_EQ(k->cmdline_max, 2047u);
  EXPECT_EQ(k->initrd_addr_max, 0x7fffffffu);
  // Relocatable, loaded below pref_address: it runs from 16 MiB.
  EXPECT_EQ(k->footprint, (AddressRange{0x100000, 0x1000000 + 0x100000 - 0x100000}));
  EXPECT_EQ(k->setup_header.size(), 0x268u - 0x1f1);
  ASSERT_TRUE(LoadKernel(img, *k, *mem_).ok());
  EXPECT_EQ(*mem_->ReadObj<uint8_t>(0x100000 + 0x37), 0x37);
}

TEST_F(BzImageTest, SetupSectsZeroMeansFour) {
  BzOptions o;
  o.setup_sects = 0;
  auto k = ParseKernel(BuildBzImage(o), *mem_);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->segments[0].file_offset, 5u * 512);
}

TEST_F(BzImageTest, RejectsOldProtocol) {
  BzOptions o;
  o.version = 0x020b;
  EXPECT_EQ(Code(BuildBzImage(o)), absl::StatusCode::kInvalidArgument);
}

TEST_F(BzImageTest, RejectsKernelWithout64BitEntry) {
  BzOptions o;
  o.xloadflags = 0;
  EXPECT_EQ(Code(BuildBzImage(o)), absl::StatusCode::kInvalidArgument);
}

TEST_F(BzImageTest, RejectsZImage) {
  BzOptions o;
  o.loadflags = 0;
  EXPECT_EQ(Code(BuildBzImage(o)), absl::StatusCode::kInvalidArgument);
}

TEST_F(BzImageTest, RejectsInitSizeBeyondRam) {
  BzOptions o;
  o.init_size = 64 * kMiB;
  auto s = ParseKernel(BuildBzImage(o), *mem_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("init_size"), std::string::npos) << s;
}

TEST_F(BzImageTest, RejectsOverflowingPrefAddress) {
  BzOptions o;
  o.pref_address = UINT64_MAX - 0x10;
  EXPECT_EQ(Code(BuildBzImage(o)), absl::StatusCode::kInvalidArgument);
}

TEST_F(BzImageTest, RejectsTruncatedImage) {
  auto img = BuildBzImage(BzOptions{});
  for (size_t n : {size_t{0x206}, size_t{0x250}, size_t{5 * 512}, size_t{5 * 512 + 0x100}}) {
    std::vector<uint8_t> cut(img.begin(), img.begin() + n);
    EXPECT_EQ(Code(cut), absl::StatusCode::kInvalidArgument) << n;
  }
}

TEST_F(BzImageTest, RejectsShortSetupHeader) {
  auto img = BuildBzImage(BzOptions{});
  img[0x201] = 0x30;  // header ends at 0x232, before init_size
  EXPECT_EQ(Code(img), absl::StatusCode::kInvalidArgument);
}

TEST_F(BzImageTest, RejectsBadMagic) {
  auto img = BuildBzImage(BzOptions{});
  img[0x1fe] = 0;
  EXPECT_EQ(Code(img), absl::StatusCode::kInvalidArgument);
  img = BuildBzImage(BzOptions{});
  img[0x203] = 'x';
  EXPECT_EQ(Code(img), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsec::arch
