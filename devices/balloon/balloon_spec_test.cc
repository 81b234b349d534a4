// SPDX-License-Identifier: Apache-2.0
#include "devices/balloon/balloon_spec.h"

#include <gtest/gtest.h>

#include "platform/memory/memfd_guest_memory.h"

namespace dsec::devices {
namespace {

TEST(BalloonSpecTest, FlagsNeedTheBalloonForATarget) {
  EXPECT_TRUE(BalloonDeviceKind().FromFlags({})->empty());
  auto one = BalloonDeviceKind().FromFlags({{"balloon", {""}}, {"balloon-target-mib", {"8"}}});
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0]->ToJson()["target_mib"], 8);
  EXPECT_FALSE(BalloonDeviceKind().FromFlags({{"balloon-target-mib", {"8"}}}).ok());
  EXPECT_FALSE(BalloonDeviceKind().FromFlags({{"balloon", {""}}, {"balloon-target-mib", {"x"}}}).ok());
}

TEST(BalloonSpecTest, BuildsOverGuestRamAndOffersItsControl) {
  auto mem = memory::MemfdGuestMemory::Create({{0, 32u << 20}}, {});
  ASSERT_TRUE(mem.ok()) << mem.status();
  BalloonSpec spec;
  spec.target_mib = 4;
  virtio::DeviceEnv env;
  env.memory = mem->get();
  auto built = spec.Build(env);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->device->device_type(), virtio::DeviceType::kBalloon);
  BalloonControl* control = AsBalloonControl(&built->control);
  ASSERT_NE(control, nullptr);
  EXPECT_EQ(control->target_pages(), 4u * 256u);
  // Another kind's control object is not a balloon's.
  std::any other = std::make_shared<int>(1);
  EXPECT_EQ(AsBalloonControl(&other), nullptr);
  // What the kind says it offers is what the builder puts there (the VM's
  // owner finds the balloon by this type).
  EXPECT_EQ(BalloonDeviceKind().control_type(), typeid(BalloonControl));
  EXPECT_NE(std::any_cast<std::shared_ptr<BalloonControl>>(&built->control), nullptr);

  BalloonSpec too_big;
  too_big.target_mib = 64;
  EXPECT_FALSE(too_big.Build(env).ok());
}

TEST(BalloonSpecTest, ItsBackEndPunchesHolesOnTheEventLoop) {
  const virtio::HostCalls calls = BalloonDeviceKind().host_calls();
  ASSERT_EQ(calls.syscalls.size(), 1u);
  EXPECT_EQ(calls.syscalls[0].name, "fallocate");
  EXPECT_EQ(calls.syscalls[0].thread, virtio::HostThread::kEventLoop);
  EXPECT_FALSE(calls.syscalls[0].why.empty());
}

}  // namespace
}  // namespace dsec::devices
