// SPDX-License-Identifier: Apache-2.0
#include "devices/net/net_spec.h"

#include <gtest/gtest.h>
#include <linux/if_tun.h>
#include <sys/ioctl.h>

namespace dsec::devices {
namespace {

TEST(NetSpecTest, JsonChecksTapNameAndUnicastMac) {
  nlohmann::json ok = {{"tap", "tap0"}, {"mac", "02:00:00:aa:bb:cc"}};
  auto f = JsonFields::Of(ok, "devices[0]");
  auto spec = NetDeviceKind().FromJson(*f);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)->ToJson()["mac"], "02:00:00:aa:bb:cc");
  nlohmann::json multicast = {{"tap", "tap0"}, {"mac", "01:00:00:aa:bb:cc"}};
  auto g = JsonFields::Of(multicast, "devices[0]");
  EXPECT_EQ(FieldOf(NetDeviceKind().FromJson(*g).status()), "devices[0].mac");
  nlohmann::json long_name = {{"tap", "a-name-far-too-long-for-ifnamsiz"}};
  auto h = JsonFields::Of(long_name, "devices[0]");
  EXPECT_EQ(FieldOf(NetDeviceKind().FromJson(*h).status()), "devices[0].tap");
}

TEST(NetSpecTest, FlagsParseTapAndMac) {
  auto specs = NetDeviceKind().FromFlags({{"net", {"tap0,mac=02:00:00:aa:bb:cc", "tap1"}}});
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  EXPECT_EQ((*specs)[0]->ToJson()["tap"], "tap0");
  EXPECT_FALSE((*specs)[1]->ToJson().contains("mac"));
  EXPECT_FALSE(NetDeviceKind().FromFlags({{"net", {"tap0,mac=02:00:00:aa:bb"}}}).ok());
  EXPECT_FALSE(NetDeviceKind().FromFlags({{"net", {"tap0,speed=10"}}}).ok());
}

TEST(NetSpecTest, ATapDescriptorInsteadOfAName) {
  nlohmann::json by_fd = {{"tap_fd", 5}, {"mac", "02:00:0a:c9:00:02"}};
  auto f = JsonFields::Of(by_fd, "devices[0]");
  auto spec = NetDeviceKind().FromJson(*f);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)->ToJson(), (nlohmann::json{{"type", "net"}, {"tap_fd", 5}, {"mac", "02:00:0a:c9:00:02"}}));
  for (const nlohmann::json& bad : {nlohmann::json{{"tap_fd", 2}}, nlohmann::json{{"tap_fd", -1}},
                                    nlohmann::json{{"tap_fd", 5}, {"tap", "tap0"}}, nlohmann::json::object()}) {
    auto g = JsonFields::Of(bad, "devices[0]");
    auto s = NetDeviceKind().FromJson(*g);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad.dump();
    EXPECT_TRUE(FieldOf(s.status()).has_value()) << bad.dump();
  }
  auto flags = NetDeviceKind().FromFlags({{"net-fd", {"4,mac=02:00:00:aa:bb:cc"}}});
  ASSERT_TRUE(flags.ok()) << flags.status();
  ASSERT_EQ(flags->size(), 1u);
  EXPECT_EQ((*flags)[0]->ToJson()["tap_fd"], 4);
  EXPECT_FALSE(NetDeviceKind().FromFlags({{"net-fd", {"1"}}}).ok());
  EXPECT_FALSE(NetDeviceKind().FromFlags({{"net-fd", {"tap0"}}}).ok());
}

TEST(NetSpecTest, BuildingOnAMissingTapNamesIt) {
  NetSpec spec;
  spec.tap = "dsecnotap0";
  auto built = spec.Build(virtio::DeviceEnv{});
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.status().message().find("dsecnotap0"), absl::string_view::npos) << built.status();
}

TEST(NetSpecTest, TheJailLetsTheLoopSetTheTapsOffloads) {
  // NetDevice::Activate (on the event loop) sets the offloads the guest
  // negotiated with TUNSETOFFLOAD; the tap's frames come in by readv.
  const virtio::HostCalls calls = NetDeviceKind().host_calls();
  ASSERT_EQ(calls.ioctls.size(), 1u);
  EXPECT_EQ(calls.ioctls[0].request, static_cast<unsigned long>(TUNSETOFFLOAD));
  EXPECT_EQ(calls.ioctls[0].thread, virtio::HostThread::kEventLoop);
  ASSERT_EQ(calls.syscalls.size(), 1u);
  EXPECT_EQ(calls.syscalls[0].name, "readv");
}

}  // namespace
}  // namespace dsec::devices
