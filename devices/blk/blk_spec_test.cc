// SPDX-License-Identifier: Apache-2.0
#include "devices/blk/blk_spec.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>

#include "base/scoped_fd.h"

namespace dsec::devices {
namespace {

TEST(BlkSpecTest, JsonNeedsAPathAndRejectsBadTypes) {
  nlohmann::json ok = {{"path", "/img/a.raw"}, {"read_only", true}};
  auto f = JsonFields::Of(ok, "devices[1]");
  auto spec = BlkDeviceKind().FromJson(*f);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)->ToJson(), (nlohmann::json{{"type", "disk"}, {"path", "/img/a.raw"}, {"read_only", true}}));

  nlohmann::json missing = nlohmann::json::object();
  auto g = JsonFields::Of(missing, "devices[1]");
  EXPECT_EQ(FieldOf(BlkDeviceKind().FromJson(*g).status()), "devices[1].path");
  nlohmann::json bad = {{"path", "/x"}, {"read_only", "yes"}};
  auto h = JsonFields::Of(bad, "devices[1]");
  EXPECT_EQ(FieldOf(BlkDeviceKind().FromJson(*h).status()), "devices[1].read_only");
}

TEST(BlkSpecTest, FlagsKeepTheirOrder) {
  auto specs = BlkDeviceKind().FromFlags({{"disk", {"/a.raw", "/b.raw,ro"}}});
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  EXPECT_EQ((*specs)[0]->ToJson()["path"], "/a.raw");
  EXPECT_EQ((*specs)[1]->ToJson()["read_only"], true);
  EXPECT_FALSE(BlkDeviceKind().FromFlags({{"disk", {"/c.raw,rw"}}}).ok());
}

TEST(BlkSpecTest, BuildsOnAnImageAndNamesAMissingOne) {
  char path[] = "/tmp/dsec-blk-spec-XXXXXX";
  {
    ScopedFd fd(::mkstemp(path));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::ftruncate(fd.get(), 1 << 20), 0);
  }
  BlkSpec spec;
  spec.path = path;
  virtio::DeviceEnv env;
  env.index = 2;
  auto built = spec.Build(env);
  ::unlink(path);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->name, "virtio-blk2");
  EXPECT_EQ(built->device->device_type(), virtio::DeviceType::kBlock);

  spec.path = "/nonexistent/disk.raw";
  auto missing = spec.Build(env);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/disk.raw"), absl::string_view::npos);
}

}  // namespace
}  // namespace dsec::devices
