// SPDX-License-Identifier: Apache-2.0
#include "sched/cpu_list.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dsec::sched {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(CpuListTest, ParsesRangesAndSinglesWithTrailingNewline) {
  auto cpus = ParseCpuList("0-3,5,8-9\n");
  ASSERT_TRUE(cpus.ok()) << cpus.status();
  EXPECT_THAT(*cpus, ElementsAre(0, 1, 2, 3, 5, 8, 9));
}

TEST(CpuListTest, EmptyListMeansNoCpus) {
  auto cpus = ParseCpuList("\n");
  ASSERT_TRUE(cpus.ok());
  EXPECT_THAT(*cpus, IsEmpty());
}

TEST(CpuListTest, SortsAndDeduplicates) {
  auto cpus = ParseCpuList("7,1-2,2");
  ASSERT_TRUE(cpus.ok());
  EXPECT_THAT(*cpus, ElementsAre(1, 2, 7));
}

TEST(CpuListTest, RejectsMalformedLists) {
  for (const char* bad : {"a", "1-", "-1", "3-1", "1,,2", "1 2", "0-99999", "1-2-3", ",", "0x1"}) {
    auto cpus = ParseCpuList(bad);
    EXPECT_EQ(cpus.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(CpuListTest, FormatsCompressedRanges) {
  EXPECT_EQ(FormatCpuList({5, 0, 1, 2, 3, 8, 9}), "0-3,5,8-9");
  EXPECT_EQ(FormatCpuList({}), "");
  EXPECT_EQ(FormatCpuList({4}), "4");
}

TEST(CpuListTest, FormatThenParseRoundTrips) {
  std::vector<int> cpus = {0, 2, 3, 4, 10, 11, 100};
  auto parsed = ParseCpuList(FormatCpuList(cpus));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, cpus);
}

}  // namespace
}  // namespace dsec::sched
