// SPDX-License-Identifier: Apache-2.0
// The pure parts of `bench reclaim`: integration, peak, ratios, parsing.
#include "bench/reclaim_bench.h"

#include "gtest/gtest.h"

namespace dsec::bench {
namespace {

constexpr uint64_t kGiB = 1ull << 30;
constexpr int64_t kSec = 1'000'000'000;

TEST(ReclaimBenchMathTest, IntegratesTrapezoidsInGiBSeconds) {
  // 1 GiB for 2 s, then a linear ramp to 0 over 1 s: 2 + 0.5 GiB x s.
  const MemSample s[] = {{0, kGiB}, {kSec, kGiB}, {2 * kSec, kGiB}, {3 * kSec, 0}};
  EXPECT_DOUBLE_EQ(IntegrateGiBSeconds(s), 2.5);
  // Uneven sample spacing counts by time, not by sample.
  const MemSample u[] = {{0, kGiB}, {kSec / 10, kGiB}, {4 * kSec, kGiB}};
  EXPECT_DOUBLE_EQ(IntegrateGiBSeconds(u), 4.0);
  EXPECT_EQ(IntegrateGiBSeconds({}), 0.0);
  const MemSample one[] = {{5, kGiB}};
  EXPECT_EQ(IntegrateGiBSeconds(one), 0.0);
}

TEST(ReclaimBenchMathTest, PeakAndRatios) {
  const MemSample s[] = {{0, 3}, {1, 9}, {2, 4}};
  EXPECT_EQ(PeakBytes(s), 9u);
  EXPECT_DOUBLE_EQ(Reduction(6.0, 10.0), 0.4);
  EXPECT_DOUBLE_EQ(Reduction(12.0, 10.0), -0.2);
  EXPECT_EQ(Reduction(1.0, 0.0), 0.0);
  EXPECT_NEAR(Slowdown(1050.0, 1000.0), 0.05, 1e-12);
  EXPECT_NEAR(Slowdown(900.0, 1000.0), -0.1, 1e-12);
  EXPECT_EQ(Slowdown(1.0, 0.0), 0.0);
}

TEST(ReclaimBenchMathTest, ParsesPhaseLines) {
  EXPECT_EQ(ParsePhaseMs("testguest: phase name=hot ms=4321", "hot"), 4321u);
  EXPECT_EQ(ParsePhaseMs("phase name=hot ms=12\r", "hot"), 12u);
  EXPECT_EQ(ParsePhaseMs("phase name=hot ms=12 extra=1", "hot"), 12u);
  EXPECT_FALSE(ParsePhaseMs("phase name=idle ms=12", "hot"));
  EXPECT_FALSE(ParsePhaseMs("phase name=hot ms=", "hot"));
  EXPECT_FALSE(ParsePhaseMs("phase name=hot ms=12x", "hot"));
  EXPECT_FALSE(ParsePhaseMs("phase name=hotter ms=12", "hot"));
}

TEST(ReclaimBenchMathTest, FindsZramSwapDevices) {
  const char* swaps =
      "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
      "/dev/zram3                              partition\t131068\t\t0\t\t32767\n"
      "/swapfile                               file\t\t1024\t\t0\t\t-2\n"
      "/dev/zram12\tpartition\t1\t0\t-3\n"
      "/dev/zramx partition 1 0 0\n";
  EXPECT_EQ(ZramSwapIds(swaps), (std::vector<int>{3, 12}));
  EXPECT_TRUE(ZramSwapIds("Filename Type Size Used Priority\n").empty());
}

}  // namespace
}  // namespace dsec::bench
