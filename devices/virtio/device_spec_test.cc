// SPDX-License-Identifier: Apache-2.0
#include "devices/virtio/device_spec.h"

#include <gtest/gtest.h>

namespace dsec::virtio {
namespace {

TEST(ParsePathWithModeTest, PathAndReadOnlySuffix) {
  auto a = ParsePathWithMode("pmem", "/img/a.erofs");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->path, "/img/a.erofs");
  EXPECT_FALSE(a->read_only);
  auto b = ParsePathWithMode("pmem", "/img/b.erofs,ro");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->path, "/img/b.erofs");
  EXPECT_TRUE(b->read_only);
  // A comma inside a path is part of it.
  auto c = ParsePathWithMode("disk", "/img/a,b/c.raw");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->path, "/img/a,b/c.raw");
}

TEST(ParsePathWithModeTest, RejectsEmptyPathsAndUnknownOptions) {
  EXPECT_FALSE(ParsePathWithMode("disk", "").ok());
  EXPECT_FALSE(ParsePathWithMode("disk", ",ro").ok());
  auto rw = ParsePathWithMode("disk", "/img/c.raw,rw");
  ASSERT_FALSE(rw.ok());
  EXPECT_NE(rw.status().message().find("--disk /img/c.raw,rw: unknown option 'rw'"),
            absl::string_view::npos)
      << rw.status();
}

}  // namespace
}  // namespace dsec::virtio
