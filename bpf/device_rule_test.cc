// SPDX-License-Identifier: Apache-2.0
#include "bpf/device_rule.h"

#include <string>

#include "gtest/gtest.h"

namespace dsec::bpf {
namespace {

TEST(DeviceRuleTest, ParsesACharacterDevice) {
  auto r = ParseDeviceRule("c 1:3 rwm");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->type, DeviceType::kChar);
  EXPECT_EQ(r->major, 1u);
  EXPECT_EQ(r->minor, 3u);
  EXPECT_EQ(r->access, kDeviceRead | kDeviceWrite | kDeviceMknod);
  EXPECT_EQ(FormatDeviceRule(*r), "c 1:3 rwm");
}

TEST(DeviceRuleTest, StarsStandForEveryNumber) {
  auto pts = ParseDeviceRule("c 136:* rw");
  ASSERT_TRUE(pts.ok()) << pts.status();
  EXPECT_EQ(pts->major, 136u);
  EXPECT_EQ(pts->minor, kAnyDeviceNumber);
  EXPECT_EQ(pts->access, kDeviceRead | kDeviceWrite);
  auto mknod = ParseDeviceRule("b *:* m");
  ASSERT_TRUE(mknod.ok()) << mknod.status();
  EXPECT_EQ(mknod->type, DeviceType::kBlock);
  EXPECT_EQ(mknod->major, kAnyDeviceNumber);
  EXPECT_EQ(mknod->access, kDeviceMknod);
  EXPECT_EQ(FormatDeviceRule(*mknod), "b *:* m");
  auto all = ParseDeviceRule("a *:5 w");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->type, DeviceType::kAny);
  EXPECT_EQ(all->minor, 5u);
}

TEST(DeviceRuleTest, AccessLettersInAnyOrderFormatAsRwm) {
  auto r = ParseDeviceRule("  c\t4:64   mr ");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(FormatDeviceRule(*r), "c 4:64 rm");
}

TEST(DeviceRuleTest, LargestNumbersAreAccepted) {
  auto r = ParseDeviceRule("b 4095:1048575 r");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->major, kMaxDeviceMajor);
  EXPECT_EQ(r->minor, kMaxDeviceMinor);
}

TEST(DeviceRuleTest, BadRulesAreRefusedNamingTheRule) {
  for (const char* bad :
       {"",         "c",        "c 1:3",    "c 1:3 rw extra", "x 1:3 r",       "C 1:3 r",       "c 1 r",
        "c 1:3: r", "c :3 r",   "c 1: r",   "c 4096:0 r",     "c 1:1048576 r", "c -1:3 r",      "c +1:3 r",
        "c 1:3 rx", "c 1:3 rr", "c 1:3 RW", "c 0x1:3 r",      "c 1:** r",      "c 12345678:1 r"}) {
    auto r = ParseDeviceRule(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(std::string(r.status().message()).find("device rule"), std::string::npos) << bad;
    }
  }
}

TEST(DeviceRuleTest, KeyUsesTheKernelsTypeNumbers) {
  auto c = ParseDeviceRule("c 136:* rw");
  ASSERT_TRUE(c.ok());
  const DeviceKey k = DeviceRuleKey(*c);
  EXPECT_EQ(k.type, 2u);  // BPF_DEVCG_DEV_CHAR
  EXPECT_EQ(k.major, 136u);
  EXPECT_EQ(k.minor, kAnyDeviceNumber);
  auto b = ParseDeviceRule("b 8:0 r");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(DeviceRuleKey(*b).type, 1u);  // BPF_DEVCG_DEV_BLOCK
  auto a = ParseDeviceRule("a *:* m");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(DeviceRuleKey(*a).type, 0u);
}

TEST(DeviceRuleTest, DefaultSandboxDevicesAreTheContainerDevNodes) {
  std::vector<std::string> texts;
  for (const DeviceRule& r : DefaultSandboxDevices()) texts.push_back(FormatDeviceRule(r));
  EXPECT_EQ(texts, (std::vector<std::string>{"c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm",
                                             "c 5:0 rwm", "c 5:2 rw", "c 136:* rw"}));
}

}  // namespace
}  // namespace dsec::bpf
