// SPDX-License-Identifier: Apache-2.0
#include "devices/pmem/pmem_image_check.h"

#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "gtest/gtest.h"
#include "base/erofs_superblock.h"
#include "base/scoped_fd.h"

namespace dsec::devices {
namespace {

TEST(PmemImageCheckTest, UncompressedErofsIsDaxCapable) {
  auto head = EncodeErofsHead(0);
  EXPECT_EQ(ErofsDaxIncompatibility(head.data(), head.size()), "");
  // Chunked files (0x4) and a device table (0x8) do not mean compression.
  head = EncodeErofsHead(0x4 | 0x8);
  EXPECT_EQ(ErofsDaxIncompatibility(head.data(), head.size()), "");
}

TEST(PmemImageCheckTest, ReportsEachCompressionFeatureBit) {
  for (uint32_t bit : {0x1u, 0x2u, 0x10u, 0x20u}) {
    auto head = EncodeErofsHead(bit);
    std::string why = ErofsDaxIncompatibility(head.data(), head.size());
    EXPECT_NE(why.find("compressed EROFS image"), std::string::npos) << "bit " << bit << ": " << why;
    EXPECT_NE(why.find("--compress none"), std::string::npos) << why;
  }
}

TEST(PmemImageCheckTest, IgnoresOtherFilesAndShortInput) {
  auto head = EncodeErofsHead(0x1);
  head[1024] = 0;  // no magic: some other file (ext4 image, raw data)
  EXPECT_EQ(ErofsDaxIncompatibility(head.data(), head.size()), "");
  head = EncodeErofsHead(0x1);
  EXPECT_EQ(ErofsDaxIncompatibility(head.data(), 1024 + 64), "");
}

TEST(PmemImageCheckTest, ReadsTheSuperblockOfAFile) {
  ScopedFd fd(memfd_create("pmem-image-check", MFD_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  auto head = EncodeErofsHead(0x1);
  ASSERT_EQ(write(fd.get(), head.data(), head.size()), static_cast<ssize_t>(head.size()));
  EXPECT_NE(ErofsDaxIncompatibilityOfFile(fd.get()), "");
  ASSERT_EQ(pwrite(fd.get(), "\0\0\0\0", 4, 1024 + 80), 4);
  EXPECT_EQ(ErofsDaxIncompatibilityOfFile(fd.get()), "");
}

}  // namespace
}  // namespace dsec::devices
