// SPDX-License-Identifier: Apache-2.0
#include "vmm/vm/vm_config_json.h"

#include <gtest/gtest.h>

#include "vmm/vm/device_table.h"

namespace dsec::vm {
namespace {

TEST(VmConfigJsonTest, RoundTripsEveryField) {
  nlohmann::json j = {
      {"kernel", "/k/vmlinux"},
      {"initrd", "/k/initrd"},
      {"cmdline", "console=ttyS0 quiet"},
      {"mem_mib", 300},
      {"vcpus", 2},
      {"boot", "pvh"},
      {"pit", "kernel"},
      {"acpi", false},
      {"qos", "ls"},
      {"timeout_ms", 5000},
      {"console", {{"kind", "file"}, {"path", "/s/console.log"}, {"cap_bytes", 4096},
                   {"rate_bytes_per_s", 100}, {"burst_bytes", 10}}},
      {"devices", {{{"type", "pmem"}, {"path", "/i/root.erofs"}, {"read_only", true}},
                   {{"type", "vsock"}, {"guest_cid", 3}, {"socket", "/s/v.sock"}},
                   {{"type", "balloon"}, {"target_mib", 0}}}},
  };
  auto c = VmConfigFromJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kernel_path, "/k/vmlinux");
  EXPECT_EQ(c->mem_mib, 300u);
  EXPECT_EQ(c->boot, BootProtocolChoice::kPvh);
  EXPECT_EQ(c->pit, PitChoice::kKernel);
  EXPECT_FALSE(c->acpi);
  EXPECT_EQ(c->console.kind, ConsoleConfig::Kind::kFile);
  ASSERT_EQ(c->devices.size(), 3u);
  EXPECT_EQ(&c->devices[1]->kind(), FindDeviceKind("vsock"));
  EXPECT_EQ(VmConfigToJson(*c), j);
}

TEST(VmConfigJsonTest, DefaultsForAbsentKeys) {
  auto c = VmConfigFromJson(nlohmann::json::object());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->mem_mib, 128u);
  EXPECT_EQ(c->vcpus, 1u);
  EXPECT_TRUE(c->acpi);
  EXPECT_TRUE(c->devices.empty());
}

TEST(VmConfigJsonTest, EveryErrorNamesItsField) {
  struct Case {
    nlohmann::json j;
    const char* field;
  } cases[] = {
      {{{"mem_mib", 8}}, "mem_mib"},
      {{{"vcpus", "two"}}, "vcpus"},
      {{{"boot", "bios"}}, "boot"},
      {{{"kernal", "/k"}}, "kernal"},
      {{{"console", {{"kind", "file"}}}}, "console.path"},
      {{{"console", {{"colour", 1}}}}, "console.colour"},
      {{{"devices", {{{"type", "gpu"}}}}}, "devices[0].type"},
      {{{"devices", {{{"path", "/x"}}}}}, "devices[0].type"},
      {{{"devices", {{{"type", "disk"}, {"path", "/x"}, {"cache", "none"}}}}}, "devices[0].cache"},
      {{{"devices", {{{"type", "rng"}}, {{"type", "vsock"}, {"guest_cid", 1}, {"socket", "/s"}}}}},
       "devices[1].guest_cid"},
      {{{"devices", {{"type", "rng"}}}}, "devices"},  // an object, not a list
      {{{"devices", nlohmann::json::array({"rng"})}}, "devices[0]"},
  };
  for (const Case& c : cases) {
    auto r = VmConfigFromJson(c.j);
    ASSERT_FALSE(r.ok()) << c.j.dump();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.j.dump();
    EXPECT_EQ(FieldOf(r.status()), c.field) << c.j.dump() << ": " << r.status();
  }
  EXPECT_FALSE(VmConfigFromJson(nlohmann::json::array()).ok());
}

TEST(VmConfigJsonTest, TheTableKnowsEveryKindOnce) {
  for (const char* name : {"rng", "balloon", "disk", "net", "vsock", "pmem"}) {
    const virtio::DeviceKind* k = FindDeviceKind(name);
    ASSERT_NE(k, nullptr) << name;
    EXPECT_EQ(k->name(), name);
  }
  EXPECT_EQ(FindDeviceKind("gpu"), nullptr);
  EXPECT_EQ(DeviceKinds().size(), 6u);
}

}  // namespace
}  // namespace dsec::vm
