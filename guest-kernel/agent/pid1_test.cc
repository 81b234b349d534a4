// SPDX-License-Identifier: Apache-2.0
// PID 1's pure half: dsec.* parameters and the mount plan.
#include "gtest/gtest.h"
#include "guest-kernel/agent/boot_plan.h"

namespace dsec::agent {
namespace {

TEST(KernelCmdlineTest, SplitsLikeTheKernel) {
  EXPECT_EQ(SplitKernelCmdline("  console=ttyS0 ro\tquiet\n"),
            (std::vector<std::string>{"console=ttyS0", "ro", "quiet"}));
  EXPECT_EQ(SplitKernelCmdline("a=\"x y\" \"b=1 2\" c"),
            (std::vector<std::string>{"a=x y", "b=1 2", "c"}));
  EXPECT_TRUE(SplitKernelCmdline("").empty());
}

TEST(BootConfigTest, DefaultsWithoutDsecParameters) {
  BootConfig c = ParseBootConfig("console=ttyS0 root=/dev/pmem0 rootfstype=erofs ro\n");
  EXPECT_TRUE(c.layers.empty());
  EXPECT_EQ(c.upper_mib, 256u);
  EXPECT_FALSE(c.run.has_value());
  EXPECT_FALSE(c.oneshot);
  EXPECT_EQ(c.port, 1024u);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(BootConfigTest, ParsesEveryParameter) {
  // "echo hi; exit 3" in base64.
  BootConfig c = ParseBootConfig(
      "console=ttyS0 dsec.layers=/dev/pmem1,/dev/pmem2 dsec.upper=tmpfs:64 "
      "dsec.run=ZWNobyBoaTsgZXhpdCAz dsec.oneshot=1 dsec.port=5000 panic=-1");
  EXPECT_EQ(c.layers, (std::vector<std::string>{"/dev/pmem1", "/dev/pmem2"}));
  EXPECT_EQ(c.upper_mib, 64u);
  ASSERT_TRUE(c.run.has_value());
  EXPECT_EQ(*c.run, "echo hi; exit 3");
  EXPECT_TRUE(c.oneshot);
  EXPECT_EQ(c.port, 5000u);
  EXPECT_TRUE(c.warnings.empty()) << c.warnings[0];
}

TEST(BootConfigTest, ParsesTheNetwork) {
  BootConfig c = ParseBootConfig("dsec.net=10.201.0.2/16,10.201.0.1");
  ASSERT_TRUE(c.net.has_value());
  EXPECT_FALSE(c.net_malformed);
  EXPECT_EQ(Ipv4String(c.net->address), "10.201.0.2");
  EXPECT_EQ(c.net->prefix_len, 16);
  EXPECT_EQ(Ipv4String(c.net->gateway), "10.201.0.1");
  EXPECT_FALSE(ParseBootConfig("console=ttyS0").net.has_value());
  for (const char* bad : {"10.201.0.2,10.201.0.1", "10.201.0.2/33,10.201.0.1", "10.201.0.2/0,10.201.0.1",
                          "10.201.0.2/16", "10.201.0.2/16,10.201.0.2", "10.201.0.256/16,10.201.0.1",
                          "0.0.0.0/16,10.201.0.1", "10.201.0/16,10.201.0.1", "10.201.0.2/16,10.201.0.1,x", ""}) {
    BootConfig b = ParseBootConfig(std::string("dsec.net=") + bad);
    EXPECT_FALSE(b.net.has_value()) << bad;
    EXPECT_TRUE(b.net_malformed) << bad;
    EXPECT_EQ(b.warnings.size(), 1u) << bad;
  }
}

TEST(BootConfigTest, DecodesUnpaddedAndUrlSafeBase64) {
  EXPECT_EQ(*ParseBootConfig("dsec.run=ZWNobyBoaQ").run, "echo hi");
  // "a>?" encodes with '+'/'/' in the standard alphabet ("YT4/"), '-'/'_' URL-safe.
  EXPECT_EQ(*ParseBootConfig("dsec.run=YT4_").run, "a>?");
  EXPECT_EQ(*ParseBootConfig("dsec.run=YT4/").run, "a>?");
}

TEST(BootConfigTest, BadValuesWarnAndKeepDefaults) {
  BootConfig c = ParseBootConfig(
      "dsec.upper=ext4:10 dsec.run=!!notbase64 dsec.port=0 dsec.oneshot=maybe "
      "dsec.layers=relative,/dev/pmem1,, dsec.bogus=1");
  EXPECT_EQ(c.upper_mib, 256u);
  EXPECT_FALSE(c.run.has_value());
  EXPECT_EQ(c.port, 1024u);
  EXPECT_FALSE(c.oneshot);
  EXPECT_EQ(c.layers, (std::vector<std::string>{"/dev/pmem1"}));
  EXPECT_EQ(c.warnings.size(), 6u);
  EXPECT_EQ(ParseBootConfig("dsec.upper=tmpfs:0").upper_mib, 256u);
  EXPECT_EQ(ParseBootConfig("dsec.port=4294967295").port, 1024u);  // VMADDR_PORT_ANY
  EXPECT_EQ(ParseBootConfig("dsec.upper=tmpfs").upper_mib, 256u);
  EXPECT_TRUE(ParseBootConfig("dsec.upper=tmpfs").warnings.empty());
}

TEST(BootConfigTest, LastRepeatedParameterWins) {
  BootConfig c = ParseBootConfig(
      "dsec.port=1 dsec.port=2 dsec.layers=/a dsec.layers=/b dsec.oneshot=1 "
      "dsec.oneshot=0");
  EXPECT_EQ(c.port, 2u);
  EXPECT_EQ(c.layers, (std::vector<std::string>{"/b"}));
  EXPECT_FALSE(c.oneshot);
}

TEST(BootConfigTest, EmptyLayersMeansTheRootImageOnly) {
  BootConfig c = ParseBootConfig("dsec.layers=");
  EXPECT_TRUE(c.layers.empty());
  MountPlan p = BuildMountPlan(c);
  EXPECT_TRUE(p.layers.empty());
  EXPECT_EQ(p.overlay_data,
            "lowerdir=/,upperdir=/run/upper/upper,workdir=/run/upper/work,"
            "redirect_dir=off,metacopy=off");
}

TEST(MountPlanTest, StacksLayersUppermostFirst) {
  BootConfig c =
      ParseBootConfig("dsec.layers=/dev/pmem1,/dev/pmem2,/dev/pmem3 dsec.upper=tmpfs:64");
  MountPlan p = BuildMountPlan(c);
  ASSERT_EQ(p.layers.size(), 3u);
  EXPECT_EQ(p.layers[0].device, "/dev/pmem1");
  EXPECT_EQ(p.layers[0].dir, "/layers/0");
  EXPECT_EQ(p.layers[2].device, "/dev/pmem3");
  EXPECT_EQ(p.layers[2].dir, "/layers/2");
  EXPECT_EQ(p.overlay_data,
            "lowerdir=/layers/2:/layers/1:/layers/0,upperdir=/run/upper/upper,"
            "workdir=/run/upper/work,redirect_dir=off,metacopy=off");
  EXPECT_EQ(p.upper_tmpfs_data, "size=64m,mode=0755");
  EXPECT_EQ(p.newroot, "/newroot");
  EXPECT_EQ(p.upper_mount, "/run/upper");
}

TEST(MountPlanTest, OverlayOptionsJoinLowerDirs) {
  EXPECT_EQ(OverlayOptions({"/a"}, "/u", "/w"),
            "lowerdir=/a,upperdir=/u,workdir=/w,redirect_dir=off,metacopy=off");
}

TEST(MountInfoTest, FindsAnOptionOfTheLastMountAtAPoint) {
  const char* info =
      "22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
      "40 30 259:1 / /layers/0 ro,relatime - erofs /dev/pmem1 ro,user_xattr,acl,dax=always\n"
      "41 30 259:2 / /layers/1 ro,relatime shared:5 - erofs /dev/pmem2 ro,user_xattr,acl\n"
      "42 30 0:40 / /stacked rw - erofs /dev/pmem3 ro,dax=always\n"
      "43 30 0:41 / /stacked rw - tmpfs tmpfs rw\n";
  EXPECT_TRUE(MountHasOption(info, "/layers/0", "dax=always"));
  EXPECT_FALSE(MountHasOption(info, "/layers/1", "dax=always"));
  EXPECT_FALSE(MountHasOption(info, "/layers/2", "dax=always"));
  EXPECT_FALSE(MountHasOption(info, "/stacked", "dax=always"));
  EXPECT_FALSE(MountHasOption(info, "/layers/0", "dax"));
  EXPECT_FALSE(MountHasOption("garbage\n\n1 2 3\n", "/layers/0", "dax=always"));
}

}  // namespace
}  // namespace dsec::agent
