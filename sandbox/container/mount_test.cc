// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/mount.h"

#include "gtest/gtest.h"

namespace dsec::container {
namespace {

TEST(ParseMountPointsTest, ReadsFieldFiveAndUnescapes) {
  auto points = ParseMountPoints(
      "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
      "90 27 0:50 / /run/a\\040b rw - tmpfs tmpfs rw\n");
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0], "/");
  EXPECT_EQ(points[1], "/run/a b");
}

TEST(MountTest, OverlayNeedsALowerAndRejectsSeparatorsInPaths) {
  EXPECT_TRUE(absl::IsInvalidArgument(Mount::Overlay({}, "/u", "/w", "/m").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Mount::Overlay({"/a:b"}, "/u", "/w", "/m").status()));
}

}  // namespace
}  // namespace dsec::container
