// SPDX-License-Identifier: Apache-2.0
#include "devices/blk/disk_image.h"

#include <string>

#include "devices/blk/blk_test_util.h"
#include "gtest/gtest.h"

namespace dsec::devices {
namespace {

using testing::TempImage;

TEST(DiskImageTest, CapacityIsSizeRoundedDownToSectors) {
  TempImage image(1 << 20 | 100);
  absl::StatusOr<DiskImage> disk = DiskImage::Open(image.path(), /*read_only=*/false);
  ASSERT_TRUE(disk.ok()) << disk.status();
  EXPECT_EQ(disk->capacity_sectors(), 2048u);
  EXPECT_EQ(disk->size_bytes(), (1u << 20) + 100);
  EXPECT_FALSE(disk->read_only());
  EXPECT_GE(disk->fd(), 0);
}

TEST(DiskImageTest, RefusesImagesSmallerThanOneSector) {
  for (uint64_t size : {0u, 511u}) {
    TempImage image(size);
    absl::StatusOr<DiskImage> disk = DiskImage::Open(image.path(), false);
    EXPECT_EQ(disk.status().code(), absl::StatusCode::kInvalidArgument) << size;
    EXPECT_NE(disk.status().message().find("too small"), absl::string_view::npos);
  }
}

TEST(DiskImageTest, SecondWriterIsRefusedWhileFirstHoldsTheLock) {
  TempImage image(4096);
  absl::StatusOr<DiskImage> first = DiskImage::Open(image.path(), false);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(DiskImage::Open(image.path(), false).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(DiskImage::Open(image.path(), true).status().code(),
            absl::StatusCode::kFailedPrecondition);
  first = absl::UnknownError("closed");  // releases the lock
  EXPECT_TRUE(DiskImage::Open(image.path(), false).ok());
}

TEST(DiskImageTest, ReadersShareButExcludeWriters) {
  TempImage image(4096);
  absl::StatusOr<DiskImage> a = DiskImage::Open(image.path(), true);
  absl::StatusOr<DiskImage> b = DiskImage::Open(image.path(), true);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(a->read_only());
  EXPECT_EQ(DiskImage::Open(image.path(), false).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(DiskImageTest, MissingFileIsNotFound) {
  EXPECT_EQ(DiskImage::Open("/nonexistent/dsec-disk.img", false).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(DiskImageTest, RefusesDirectory) {
  EXPECT_EQ(DiskImage::Open("/", true).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsec::devices
