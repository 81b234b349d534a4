// SPDX-License-Identifier: Apache-2.0
#include "devices/balloon/balloon_pages.h"

#include "gtest/gtest.h"

namespace dsec::devices {
namespace {

TEST(BalloonPageSetTest, TracksPagesOfEachRegionOnly) {
  std::vector<BalloonRange> ram = {{0, 0x10000}, {0x100000, 0x2000}};
  BalloonPageSet set(ram);
  EXPECT_EQ(set.Find(0), BalloonPageSet::Lookup::kOut);
  EXPECT_EQ(set.Find(0x10), BalloonPageSet::Lookup::kNotRam);   // the hole
  EXPECT_EQ(set.Find(0x101), BalloonPageSet::Lookup::kOut);
  EXPECT_EQ(set.Find(0x102), BalloonPageSet::Lookup::kNotRam);  // past the end
  EXPECT_TRUE(set.Insert(0x101));
  EXPECT_FALSE(set.Insert(0x101));
  EXPECT_FALSE(set.Insert(0x10));
  EXPECT_EQ(set.Find(0x101), BalloonPageSet::Lookup::kIn);
  EXPECT_EQ(set.count(), 1u);
  EXPECT_TRUE(set.Erase(0x101));
  EXPECT_FALSE(set.Erase(0x101));
  EXPECT_TRUE(set.Insert(3));
  set.Clear();
  EXPECT_EQ(set.count(), 0u);
  EXPECT_EQ(set.Find(3), BalloonPageSet::Lookup::kOut);
}

}  // namespace
}  // namespace dsec::devices
