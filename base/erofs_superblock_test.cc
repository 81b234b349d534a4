// SPDX-License-Identifier: Apache-2.0
#include "base/erofs_superblock.h"

#include <sys/mman.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "base/scoped_fd.h"

namespace dsec {
namespace {

TEST(ErofsSuperblockTest, DecodesCompressionBits) {
  auto plain = EncodeErofsHead(0);
  auto info = DecodeErofsSuperblock(plain.data(), plain.size());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->compressed);
  EXPECT_EQ(info->block_size_bits, 12);
  // Chunked files (0x4) and a device table (0x8) do not mean compression.
  auto chunked = EncodeErofsHead(0x4 | 0x8);
  EXPECT_FALSE(DecodeErofsSuperblock(chunked.data(), chunked.size())->compressed);
  for (uint32_t bit : {0x1u, 0x2u, 0x10u, 0x20u}) {
    auto z = EncodeErofsHead(bit | 0x4);
    info = DecodeErofsSuperblock(z.data(), z.size());
    ASSERT_TRUE(info.ok());
    EXPECT_TRUE(info->compressed) << bit;
    EXPECT_EQ(info->feature_incompat, bit | 0x4);
  }
}

TEST(ErofsSuperblockTest, RejectsShortInputAndOtherFiles) {
  auto head = EncodeErofsHead(0);
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeErofsSuperblock(head.data(), kErofsHeadBytes - 1).status()));
  head[kErofsSuperblockOffset] = 0;  // no magic: an ext4 image, raw data
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeErofsSuperblock(head.data(), head.size()).status()));
}

TEST(ErofsSuperblockTest, MagicIsLittleEndianAtByte1024) {
  auto head = EncodeErofsHead(0x12345678, 9);
  EXPECT_EQ(head[1024], 0xE2);
  EXPECT_EQ(head[1027], 0xE0);
  EXPECT_EQ(head[1024 + 80], 0x78);
  EXPECT_EQ(head[1024 + 83], 0x12);
  EXPECT_EQ(head[1024 + 12], 9);
}

TEST(ErofsSuperblockTest, ReadsTheSuperblockOfAFileWithoutMovingItsOffset) {
  ScopedFd fd(memfd_create("erofs-superblock", MFD_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  auto head = EncodeErofsHead(0x2);
  ASSERT_EQ(write(fd.get(), head.data(), head.size()), static_cast<ssize_t>(head.size()));
  auto sb = ReadErofsSuperblock(fd.get(), "memfd");
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_TRUE(sb->compressed);
  EXPECT_EQ(lseek(fd.get(), 0, SEEK_CUR), static_cast<off_t>(head.size()));
  ASSERT_EQ(ftruncate(fd.get(), 1100), 0);
  sb = ReadErofsSuperblock(fd.get(), "memfd");
  EXPECT_TRUE(absl::IsInvalidArgument(sb.status()));
  EXPECT_NE(sb.status().message().find("memfd"), absl::string_view::npos) << sb.status();
  EXPECT_TRUE(absl::IsNotFound(ReadErofsSuperblock("/nonexistent/image.erofs").status()));
}

}  // namespace
}  // namespace dsec
