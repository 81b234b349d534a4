// SPDX-License-Identifier: Apache-2.0
#include "sched/cgroup.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sched/sandbox_cgroup.h"

namespace dsec::sched {
namespace {

using ::testing::MatchesRegex;

// This CI host: everything on v1, a v2 mount with only hugetlb.
constexpr char kHybridMountinfo[] =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
    "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
    "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

// A systemd host on the unified hierarchy.
constexpr char kUnifiedMountinfo[] =
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";

// Debian 10 style: cpu co-mounted with cpuacct, cpuset separate.
constexpr char kCoMountedMountinfo[] =
    "30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:11 - cgroup cgroup rw,cpu,cpuacct\n"
    "31 25 0:27 / /sys/fs/cgroup/cpuset rw,nosuid shared:12 - cgroup cgroup rw,cpuset\n";

// A cgroup.controllers reader that knows one file.
std::function<absl::StatusOr<std::string>(const std::string&)> OneFile(std::string path,
                                                                       std::string text) {
  return [path, text](const std::string& p) -> absl::StatusOr<std::string> {
    if (p == path) return text;
    return absl::NotFoundError(p);
  };
}

TEST(CgroupLayoutTest, FindsV1ControllersOnAHybridHost) {
  auto layout = ParseCgroupLayout(
      kHybridMountinfo, OneFile("/sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n"));
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_TRUE(layout->cpuset.has_value());
  EXPECT_EQ(layout->cpuset->version, CgroupVersion::kV1);
  EXPECT_EQ(layout->cpuset->mount_point, "/sys/fs/cgroup/cpuset");
  ASSERT_TRUE(layout->cpu.has_value());
  EXPECT_EQ(layout->cpu->mount_point, "/sys/fs/cgroup/cpu");
}

TEST(CgroupLayoutTest, FindsV2ControllersOnAUnifiedHost) {
  auto layout = ParseCgroupLayout(
      kUnifiedMountinfo,
      OneFile("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n"));
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_TRUE(layout->cpuset.has_value());
  EXPECT_EQ(layout->cpuset->version, CgroupVersion::kV2);
  EXPECT_EQ(layout->cpuset->mount_point, "/sys/fs/cgroup");
  EXPECT_EQ(layout->cpu->mount_point, "/sys/fs/cgroup");
}

TEST(CgroupLayoutTest, V2WithoutCpusetOffersNothing) {
  auto layout = ParseCgroupLayout(
      kUnifiedMountinfo, OneFile("/sys/fs/cgroup/cgroup.controllers", "io memory pids\n"));
  ASSERT_TRUE(layout.ok());
  EXPECT_FALSE(layout->cpuset.has_value());
  EXPECT_FALSE(layout->cpu.has_value());
}

TEST(CgroupLayoutTest, FindsCoMountedCpuController) {
  auto layout = ParseCgroupLayout(kCoMountedMountinfo, OneFile("", ""));
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->cpu->mount_point, "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(layout->cpuset->mount_point, "/sys/fs/cgroup/cpuset");
}

TEST(CgroupLayoutTest, RejectsMalformedMountinfo) {
  auto layout = ParseCgroupLayout("1 2 3\n", OneFile("", ""));
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(OwnCgroupDirTest, JoinsTheMountPointAndTheProcessPath) {
  ControllerMount v1{CgroupVersion::kV1, "/sys/fs/cgroup/cpuset", "/"};
  auto dir = OwnCgroupDir(v1, "4:memory:/x\n3:cpuset:/jobs/a\n0::/\n", "cpuset");
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(*dir, "/sys/fs/cgroup/cpuset/jobs/a");
  auto root = OwnCgroupDir(v1, "3:cpuset:/\n", "cpuset");
  EXPECT_EQ(*root, "/sys/fs/cgroup/cpuset");
  ControllerMount v2{CgroupVersion::kV2, "/sys/fs/cgroup", "/"};
  EXPECT_EQ(*OwnCgroupDir(v2, "0::/system.slice/dsec.service\n", "cpuset"),
            "/sys/fs/cgroup/system.slice/dsec.service");
  ControllerMount cpu{CgroupVersion::kV1, "/sys/fs/cgroup/cpu,cpuacct", "/"};
  EXPECT_EQ(*OwnCgroupDir(cpu, "2:cpu,cpuacct:/a\n", "cpu"), "/sys/fs/cgroup/cpu,cpuacct/a");
  EXPECT_EQ(OwnCgroupDir(v1, "0::/\n", "cpuset").status().code(), absl::StatusCode::kNotFound);
}

TEST(CgroupDirTest, RandomNamesAreUniqueAndShaped) {
  std::string a = RandomCgroupName(), b = RandomCgroupName();
  EXPECT_NE(a, b);
  EXPECT_THAT(a, MatchesRegex("dsec-[0-9a-f]{16}"));
}

TEST(CpuLimitsTest, BeGetsALowWeightAndOptionalQuota) {
  CpuLimits ls = CpuLimitsFor(QosClass::kLatencySensitive, {});
  EXPECT_EQ(ls.v1_shares, 1024u);
  EXPECT_EQ(ls.v2_weight, 100u);
  EXPECT_FALSE(ls.quota_us.has_value());
  CpuLimits be = CpuLimitsFor(QosClass::kBestEffort, {.be_cpu_shares = 64, .be_quota_cpus = 0.5});
  EXPECT_EQ(be.v1_shares, 64u);
  EXPECT_EQ(be.v2_weight, SharesToWeight(64));
  EXPECT_EQ(be.quota_us, 50000);
}

TEST(CpuLimitsTest, SharesMapOntoTheWeightRange) {
  EXPECT_EQ(SharesToWeight(2), 1u);
  EXPECT_EQ(SharesToWeight(262144), 10000u);
  EXPECT_EQ(SharesToWeight(1024), 39u);
  EXPECT_EQ(SharesToWeight(0), 1u);
}

}  // namespace
}  // namespace dsec::sched
