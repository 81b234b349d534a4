// SPDX-License-Identifier: Apache-2.0
#include "pmem-dax/pmem_spec.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <vector>

#include "base/scoped_fd.h"
#include "platform/bus/bus.h"

namespace dsec::pmem {
namespace {

// Records what the device asked for; maps nothing.
class FakeAddressSpace : public virtio::GuestAddressSpace {
 public:
  absl::StatusOr<uint64_t> AllocateWindow(uint64_t size) override {
    const uint64_t at = next_;
    next_ += size;
    return at;
  }
  absl::StatusOr<std::unique_ptr<virtio::GuestMapping>> Map(uint64_t gpa, uint64_t size, void*,
                                                            bool read_only) override {
    maps.push_back({gpa, size, read_only});
    return std::make_unique<virtio::GuestMapping>();
  }
  struct MapCall {
    uint64_t gpa, size;
    bool read_only;
  };
  std::vector<MapCall> maps;

 private:
  uint64_t next_ = 0x8000'0000;
};

TEST(PmemSpecTest, JsonAndFlags) {
  nlohmann::json j = {{"path", "/i/root.erofs"}, {"read_only", true}};
  auto f = JsonFields::Of(j, "devices[0]");
  auto spec = PmemDeviceKind().FromJson(*f);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ((*spec)->ToJson(), (nlohmann::json{{"type", "pmem"}, {"path", "/i/root.erofs"}, {"read_only", true}}));
  auto flagged = PmemDeviceKind().FromFlags({{"pmem", {"/i/a.erofs,ro", "/i/b.erofs"}}});
  ASSERT_TRUE(flagged.ok());
  ASSERT_EQ(flagged->size(), 2u);
  EXPECT_EQ((*flagged)[0]->ToJson()["read_only"], true);
  EXPECT_EQ((*flagged)[1]->ToJson()["read_only"], false);
}

TEST(PmemSpecTest, ReadOnlyLayerGetsAWindowAMappingAndAWriteSink) {
  char path[] = "/tmp/dsec-pmem-spec-XXXXXX";
  {
    ScopedFd fd(::mkstemp(path));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::ftruncate(fd.get(), 3 << 20), 0);  // rounds up to a 4 MiB window
  }
  FakeAddressSpace space;
  bus::Bus mmio("mmio");
  PmemSpec spec;
  spec.path = path;
  spec.read_only = true;
  virtio::DeviceEnv env;
  env.address_space = &space;
  env.mmio_bus = &mmio;
  {
    auto built = spec.Build(env);
    ASSERT_TRUE(built.ok()) << built.status();
    EXPECT_EQ(built->device->device_type(), virtio::DeviceType::kPmem);
    ASSERT_EQ(space.maps.size(), 1u);
    EXPECT_EQ(space.maps[0].gpa, 0x8000'0000u);
    EXPECT_EQ(space.maps[0].size, 4u << 20);
    EXPECT_TRUE(space.maps[0].read_only);
    EXPECT_EQ(mmio.range_count(), 1u) << "guest writes to the read-only window land in a sink";
    const PmemLayer* layer = AsPmemLayer(&built->control);
    ASSERT_NE(layer, nullptr);
    EXPECT_EQ(PmemDeviceKind().control_type(), typeid(PmemLayer));
    EXPECT_EQ(layer->gpa(), 0x8000'0000u);
    EXPECT_EQ(layer->size(), 4u << 20);
    EXPECT_EQ(layer->refused_writes(), 0u);
    // Resources released newest first: the sink's claim leaves the bus.
    while (!built->resources.empty()) built->resources.pop_back();
    EXPECT_EQ(mmio.range_count(), 0u);
  }
  ::unlink(path);
  spec.path = "/nonexistent.erofs";
  EXPECT_FALSE(spec.Build(env).ok());
}

}  // namespace
}  // namespace dsec::pmem
