// SPDX-License-Identifier: Apache-2.0
#include "base/mount.h"

#include <sched.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <string>

#include "gtest/gtest.h"

namespace dsec {
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
  EXPECT_EQ(OverlayLowerDir({"/low", "/mid", "/top"}).value_or(""), "/top:/mid:/low");
}

// Runs `body` in a child with a private mount namespace (nothing it mounts
// can outlive it); its exit code, or -1 when it could not run.
int InPrivateMountNamespace(const std::function<int()>& body) {
  pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      ::_exit(100);
    }
    ::_exit(body());
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool Mounted(const std::string& dir) {
  auto points = MountPointsBelow(dir);
  return points.ok() && std::find(points->begin(), points->end(), dir) != points->end();
}

TEST(MountTest, OwnsAMountUntilDestroyedMovedOrUnmounted) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting needs root";
  char tmpl[] = "/tmp/dsec-mount-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  int rc = InPrivateMountNamespace([&dir]() -> int {
    {
      auto m = Mount::Tmpfs(dir, 1 << 20);
      if (!m.ok()) return 1;
      if (!Mounted(dir) || m->target() != dir) return 2;
      Mount moved = std::move(*m);
      if (!m->target().empty() || !Mounted(dir)) return 3;
    }
    if (Mounted(dir)) return 4;  // the destructor detached it
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") != 0) return 5;
    Mount adopted = Mount::Adopt(dir);
    if (!adopted.Unmount().ok() || Mounted(dir)) return 6;
    if (!adopted.Unmount().ok()) return 7;  // nothing left: fine
    return UnmountBelow(dir).value_or(-1) == 0 ? 0 : 8;
  });
  ::rmdir(tmpl);
  if (rc == 100) GTEST_SKIP() << "no private mount namespace here";
  EXPECT_EQ(rc, 0);
}

}  // namespace
}  // namespace dsec
