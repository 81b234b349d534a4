// SPDX-License-Identifier: Apache-2.0
#include "devices/vsock/vsock_spec.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "base/event_loop.h"

namespace dsec::devices {
namespace {

TEST(VsockSpecTest, JsonAndFlagsRejectReservedCids) {
  nlohmann::json ok = {{"guest_cid", 7}, {"socket", "/run/v.sock"}};
  auto f = JsonFields::Of(ok, "devices[3]");
  auto spec = VsockDeviceKind().FromJson(*f);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)->ToJson(), (nlohmann::json{{"type", "vsock"}, {"guest_cid", 7}, {"socket", "/run/v.sock"}}));
  nlohmann::json reserved = {{"guest_cid", 2}, {"socket", "/run/v.sock"}};
  auto g = JsonFields::Of(reserved, "devices[3]");
  EXPECT_EQ(FieldOf(VsockDeviceKind().FromJson(*g).status()), "devices[3].guest_cid");

  auto flagged = VsockDeviceKind().FromFlags({{"vsock", {"7,/run/v.sock"}}});
  ASSERT_TRUE(flagged.ok());
  EXPECT_EQ(flagged->size(), 1u);
  for (const char* bad : {"2,/run/v.sock", "x,/run/v.sock", "5", "5,"}) {
    EXPECT_FALSE(VsockDeviceKind().FromFlags({{"vsock", {bad}}}).ok()) << bad;
  }
  EXPECT_FALSE(VsockDeviceKind().FromFlags({{"vsock", {"3,/a", "4,/b"}}}).ok());
}

TEST(VsockSpecTest, BuildsWithItsUnixBackendAndRefusesASecond) {
  char dir[] = "/tmp/dsec-vsock-spec-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  auto loop = EventLoop::Create();
  ASSERT_TRUE(loop.ok());
  VsockSpec spec;
  spec.socket_path = std::string(dir) + "/v.sock";
  virtio::DeviceEnv env;
  env.loop = loop->get();
  {
    auto built = spec.Build(env);
    ASSERT_TRUE(built.ok()) << built.status();
    EXPECT_EQ(built->device->device_type(), virtio::DeviceType::kVsock);
    EXPECT_EQ(built->resources.size(), 1u);
    EXPECT_EQ(::access(spec.socket_path.c_str(), F_OK), 0);
    env.index = 1;
    EXPECT_FALSE(spec.Build(env).ok());
  }
  EXPECT_NE(::access(spec.socket_path.c_str(), F_OK), 0) << "the backend removes its socket";
  ::rmdir(dir);
}

TEST(VsockSpecTest, ItsSocketsAreUnixOnly) {
  bool socket = false;
  for (const virtio::SyscallUse& c : VsockDeviceKind().host_calls().syscalls) {
    EXPECT_EQ(c.thread, virtio::HostThread::kEventLoop) << c.name;
    EXPECT_FALSE(c.why.empty()) << c.name;
    if (c.name == "socket") socket = c.unix_socket_only;
  }
  EXPECT_TRUE(socket);
}

}  // namespace
}  // namespace dsec::devices
