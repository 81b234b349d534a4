// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/errors.h"

#include "gtest/gtest.h"

namespace dsec::daemon {
namespace {

TEST(ErrorsTest, HostPathsAreReplacedKeepingCodeAndField) {
  absl::Status s = InvalidField("cpus", "write \"100\" to /sys/fs/cgroup/cpu/x/cpu.max: Invalid argument");
  absl::Status c = WithoutHostPaths(s);
  EXPECT_EQ(c.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.message(), "write \"100\" to <host path>: Invalid argument");
  EXPECT_EQ(FieldOf(c), "cpus");
  EXPECT_EQ(WithoutHostPaths(absl::InternalError("mkdir /run/dsec-vmm/containers/sb-1 (x), layer '/a/b.erofs'"))
                .message(),
            "mkdir <host path> (x), layer '<host path>'");
}

TEST(ErrorsTest, MessagesWithoutHostPathsAreKept) {
  for (const char* m : {"no sandbox sb-1", "cpus must be in [0.01, 1024]", "path must be absolute: \"/\"",
                        "a/b/c is relative", "ratio 1/2", "/work"}) {
    EXPECT_EQ(WithoutHostPaths(absl::InvalidArgumentError(m)).message(), m);
  }
}

TEST(ErrorsTest, ErrorJsonHasCodeMessageAndField) {
  EXPECT_EQ(ErrorJson(InvalidField("env.A", "too big")).dump(),
            R"({"error":{"code":"INVALID_ARGUMENT","field":"env.A","message":"too big"}})");
  EXPECT_EQ(ErrorJson(absl::DeadlineExceededError("slow")).dump(),
            R"({"error":{"code":"DEADLINE_EXCEEDED","message":"slow"}})");
}

}  // namespace
}  // namespace dsec::daemon
