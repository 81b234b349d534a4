// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/cgroups.h"

#include <string>

#include "gtest/gtest.h"

namespace dsec::container {
namespace {

absl::StatusOr<std::string> NoFiles(const std::string& path) {
  return absl::NotFoundError(path);
}

TEST(FindControllersTest, V1HierarchiesUnderOwnCgroup) {
  const std::string mountinfo =
      "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
      "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
      "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n";
  const std::string self = "8:pids:/\n4:memory:/api/x\n1:cpu:/\n0::/\n";
  auto found = FindControllers(mountinfo, self, NoFiles);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->size(), 3u);
  EXPECT_EQ((*found)[0].controller, "memory");
  EXPECT_EQ((*found)[0].parent, "/sys/fs/cgroup/memory/api/x");
  EXPECT_FALSE((*found)[0].v2);
  EXPECT_EQ((*found)[1].parent, "/sys/fs/cgroup/pids");
  EXPECT_EQ((*found)[2].parent, "/sys/fs/cgroup/cpu");
}

TEST(FindControllersTest, V2OffersWhatCgroupControllersLists) {
  const std::string mountinfo =
      "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
  auto read = [](const std::string& path) -> absl::StatusOr<std::string> {
    if (path == "/sys/fs/cgroup/cgroup.controllers") return std::string("cpuset cpu io memory pids\n");
    return absl::NotFoundError(path);
  };
  auto found = FindControllers(mountinfo, "0::/user.slice/x\n", read);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->size(), 3u);
  for (const auto& c : *found) {
    EXPECT_TRUE(c.v2);
    EXPECT_EQ(c.parent, "/sys/fs/cgroup/user.slice/x");
  }
}

TEST(FindControllersTest, V1WinsOverV2AndHybridHugetlbOnlyV2IsIgnored) {
  const std::string mountinfo =
      "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
      "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
  auto read = [](const std::string&) -> absl::StatusOr<std::string> {
    return std::string("hugetlb\n");
  };
  auto found = FindControllers(mountinfo, "4:memory:/\n0::/\n", read);
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ((*found)[0].controller, "memory");
  EXPECT_FALSE((*found)[0].v2);
}

TEST(FindControllersTest, MalformedMountinfoIsInvalidArgument) {
  auto found = FindControllers("garbage line\n", "", NoFiles);
  EXPECT_TRUE(absl::IsInvalidArgument(found.status()));
}

}  // namespace
}  // namespace dsec::container
