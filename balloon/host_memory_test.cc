// SPDX-License-Identifier: Apache-2.0
#include "balloon/host_memory.h"

#include "gtest/gtest.h"

namespace dsec::balloon {
namespace {

TEST(SwapsTest, NoSwapIsHeaderOnly) {
  auto s = ParseSwaps("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->devices, 0);
  EXPECT_FALSE(s->available());
}

TEST(SwapsTest, SumsDevices) {
  auto s = ParseSwaps(
      "Filename Type Size Used Priority\n"
      "/dev/zram0 partition 1048572 1024 100\n"
      "/swapfile file 2048 2048 -2\n");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->devices, 2);
  EXPECT_EQ(s->total_bytes, (1048572ull + 2048) * 1024);
  EXPECT_EQ(s->used_bytes, 3072ull * 1024);
  EXPECT_TRUE(s->available());
  EXPECT_FALSE(ParseSwaps("h\n/dev/x partition\n").ok());
}

TEST(SharedMappingTest, AcceptsSharedRefusesPrivateAndUnmapped) {
  const char* maps =
      "10000000-10200000 rw-s 00000000 00:01 5 /memfd:dsec-guest-ram-0 (deleted)\n"
      "10200000-10400000 rw-s 00000000 00:01 6 /memfd:dsec-guest-ram-1 (deleted)\n"
      "20000000-20100000 rw-p 00000000 00:00 0\n";
  const HostRange shared[] = {{0x10000000, 0x400000}};  // spans two mappings
  EXPECT_TRUE(CheckSharedMappings(maps, shared).ok());
  const HostRange priv[] = {{0x20000000, 0x1000}};
  EXPECT_EQ(CheckSharedMappings(maps, priv).code(), absl::StatusCode::kFailedPrecondition);
  const HostRange hole[] = {{0x10300000, 0x200000}};
  EXPECT_FALSE(CheckSharedMappings(maps, hole).ok());
}

}  // namespace
}  // namespace dsec::balloon
