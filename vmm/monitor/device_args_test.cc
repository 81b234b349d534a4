// SPDX-License-Identifier: Apache-2.0
#include "vmm/monitor/device_args.h"

#include "gtest/gtest.h"

namespace dsec::monitor {
namespace {

TEST(DeviceArgs, ParsesDisks) {
  auto d = ParseDiskArg("/img/a.raw");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->path, "/img/a.raw");
  EXPECT_FALSE(d->read_only);
  auto ro = ParseDiskArg("/img/b.raw,ro");
  ASSERT_TRUE(ro.ok());
  EXPECT_TRUE(ro->read_only);
  EXPECT_FALSE(ParseDiskArg("").ok());
  EXPECT_FALSE(ParseDiskArg("/img/c.raw,rw").ok());
}

TEST(DeviceArgs, ParsesNetsAndRejectsBadMacs) {
  auto n = ParseNetArg("tap0,mac=02:00:00:aa:bb:cc");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->tap, "tap0");
  EXPECT_EQ(n->mac, "02:00:00:aa:bb:cc");
  EXPECT_FALSE(ParseNetArg("tap0,mac=01:00:00:aa:bb:cc").ok());  // multicast
  EXPECT_FALSE(ParseNetArg("tap0,mac=02:00:00:aa:bb").ok());
  EXPECT_FALSE(ParseNetArg("a-name-far-too-long-for-ifnamsiz").ok());
}

TEST(DeviceArgs, ParsesVsockAndRejectsReservedCids) {
  auto v = ParseVsockArg("7,/run/v.sock");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->guest_cid, 7u);
  EXPECT_EQ(v->socket_path, "/run/v.sock");
  EXPECT_FALSE(ParseVsockArg("2,/run/v.sock").ok());
  EXPECT_FALSE(ParseVsockArg("x,/run/v.sock").ok());
  EXPECT_FALSE(ParseVsockArg("5").ok());
  EXPECT_FALSE(ParseVsockArg("5,").ok());
}

}  // namespace
}  // namespace dsec::monitor
