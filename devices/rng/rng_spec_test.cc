// SPDX-License-Identifier: Apache-2.0
#include "devices/rng/rng_spec.h"

#include <gtest/gtest.h>

namespace dsec::devices {
namespace {

TEST(RngSpecTest, JsonRoundTripAndFlags) {
  nlohmann::json j = {{"rate_bytes_per_s", 4096}, {"burst_bytes", 512}};
  auto f = JsonFields::Of(j, "devices[0]");
  ASSERT_TRUE(f.ok());
  auto spec = RngDeviceKind().FromJson(*f);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(f->RejectUnknown().ok());
  const nlohmann::json back = (*spec)->ToJson();
  EXPECT_EQ(back["type"], "rng");
  EXPECT_EQ(back["rate_bytes_per_s"], 4096);
  EXPECT_EQ(back["burst_bytes"], 512);

  EXPECT_TRUE(RngDeviceKind().FromFlags({})->empty());
  auto flagged = RngDeviceKind().FromFlags({{"rng", {""}}});
  ASSERT_TRUE(flagged.ok());
  EXPECT_EQ(flagged->size(), 1u);
}

TEST(RngSpecTest, BadFieldsNameThemselves) {
  nlohmann::json j = {{"rate_bytes_per_s", -1}};
  auto f = JsonFields::Of(j, "devices[2]");
  ASSERT_TRUE(f.ok());
  auto spec = RngDeviceKind().FromJson(*f);
  EXPECT_EQ(FieldOf(spec.status()), "devices[2].rate_bytes_per_s");
}

TEST(RngSpecTest, BuildsAnEntropyDevice) {
  RngSpec spec;
  virtio::DeviceEnv env;
  env.index = 1;
  auto built = spec.Build(env);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->name, "virtio-rng1");
  EXPECT_EQ(built->device->device_type(), virtio::DeviceType::kEntropy);
  EXPECT_FALSE(built->control.has_value());
}

}  // namespace
}  // namespace dsec::devices
