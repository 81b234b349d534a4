// SPDX-License-Identifier: Apache-2.0
#include "bench/container_bench.h"

#include <set>
#include <string>
#include <vector>

#include "bench/crun_peer.h"
#include "gtest/gtest.h"

namespace dsec::bench {
namespace {

TEST(ContainerBenchStats, SummarizeUsesNearestRankPercentiles) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // unsorted on purpose
  LatencySummary s = Summarize(v);
  EXPECT_EQ(s.n, 100u);
  EXPECT_DOUBLE_EQ(s.p50, 50);
  EXPECT_DOUBLE_EQ(s.p99, 99);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 100);
}

TEST(ContainerBenchStats, SummarizeOfOneSampleIsThatSample) {
  LatencySummary s = Summarize({7.25});
  EXPECT_DOUBLE_EQ(s.p50, 7.25);
  EXPECT_DOUBLE_EQ(s.p99, 7.25);
  EXPECT_DOUBLE_EQ(s.mean, 7.25);
}

TEST(ContainerBenchStats, SummarizeOfNothingIsZero) {
  LatencySummary s = Summarize({});
  EXPECT_EQ(s.n, 0u);
  EXPECT_DOUBLE_EQ(s.p50, 0);
  EXPECT_DOUBLE_EQ(s.p99, 0);
}

TEST(ContainerBenchStats, P99OfASmallSampleIsItsMaximum) {
  LatencySummary s = Summarize({1, 2, 3, 4, 50});
  EXPECT_DOUBLE_EQ(s.p50, 3);
  EXPECT_DOUBLE_EQ(s.p99, 50);
}

TEST(ContainerBenchStats, PerSecond) {
  EXPECT_DOUBLE_EQ(PerSecond(300, 1.5), 200);
  EXPECT_DOUBLE_EQ(PerSecond(10, 0), 0);
  EXPECT_DOUBLE_EQ(PerSecond(10, -1), 0);
}

TEST(ContainerBenchStats, PerItemKib) {
  EXPECT_DOUBLE_EQ(PerItemKib(1 << 20, (1 << 20) + 32 * 512 * 1024, 32), 512);
  EXPECT_DOUBLE_EQ(PerItemKib(4096, 0, 2), -2);  // memory given back meanwhile
  EXPECT_DOUBLE_EQ(PerItemKib(0, 1 << 20, 0), 0);
}

TEST(ContainerBenchStats, MeminfoKibFindsExactKeys) {
  const std::string text =
      "MemTotal:       24576000 kB\n"
      "MemFree:         1000 kB\n"
      "MemAvailable:   20000000 kB\n"
      "Percpu:             4608 kB\n"
      "HugePages_Total:       0\n";
  EXPECT_EQ(MeminfoKib(text, "MemTotal"), 24576000u);
  EXPECT_EQ(MeminfoKib(text, "MemAvailable"), 20000000u);
  EXPECT_EQ(MeminfoKib(text, "Percpu"), 4608u);
  EXPECT_EQ(MeminfoKib(text, "HugePages_Total"), 0u);
  EXPECT_FALSE(MeminfoKib(text, "Mem").has_value());
  EXPECT_FALSE(MeminfoKib(text, "SUnreclaim").has_value());
}

TEST(CrunBundleConfig, MatchesTheContainerTiersIsolation) {
  nlohmann::json c = CrunBundleConfig("/b/rootfs", {"true"}, 512ull << 20, 512);
  std::set<std::string> ns;
  for (const auto& n : c["linux"]["namespaces"]) ns.insert(n["type"].get<std::string>());
  EXPECT_EQ(ns, (std::set<std::string>{"pid", "network", "ipc", "uts", "mount", "cgroup"}));
  EXPECT_EQ(c["root"]["path"], "/b/rootfs");
  EXPECT_EQ(c["root"]["readonly"], false);
  EXPECT_EQ(c["process"]["args"], nlohmann::json({"true"}));
  EXPECT_EQ(c["process"]["terminal"], false);
  EXPECT_EQ(c["process"]["noNewPrivileges"], true);
  EXPECT_EQ(c["process"]["capabilities"]["bounding"].size(), 11u);
  EXPECT_EQ(c["linux"]["resources"]["memory"]["limit"], 512ull << 20);
  EXPECT_EQ(c["linux"]["resources"]["pids"]["limit"], 512);
  bool kpagecgroup_masked = false;
  for (const auto& p : c["linux"]["maskedPaths"]) kpagecgroup_masked |= p == "/proc/kpagecgroup";
  EXPECT_TRUE(kpagecgroup_masked);
}

}  // namespace
}  // namespace dsec::bench
