// SPDX-License-Identifier: Apache-2.0
#include "balloon/zram_swap.h"

#include "gtest/gtest.h"

namespace dsec::balloon {
namespace {

TEST(ZramMmStatTest, ParsesTheFirstThreeFields) {
  auto s = ParseZramMmStat("  8192     1024    12288        0    12288        0        0        0        0\n");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->orig_data_size, 8192u);
  EXPECT_EQ(s->compr_data_size, 1024u);
  EXPECT_EQ(s->mem_used_total, 12288u);
}

TEST(ZramMmStatTest, RejectsShortOrGarbledText) {
  EXPECT_FALSE(ParseZramMmStat("").ok());
  EXPECT_FALSE(ParseZramMmStat("1 2").ok());
  EXPECT_FALSE(ParseZramMmStat("1 x 3").ok());
}

}  // namespace
}  // namespace dsec::balloon
