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

  BalloonSpec too_big;
  too_big.target_mib = 64;
  EXPECT_FALSE(too_big.Build(env).ok());
}

}  // namespace
}  // namespace dsec::devices
