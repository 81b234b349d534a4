// SPDX-License-Identifier: Apache-2.0
#include "bench/process_runner.h"

#include "gtest/gtest.h"

namespace dsec::bench {
namespace {

TEST(RunProcesses, ReturnsResultsInJobOrderWithExitStatus) {
  std::vector<std::vector<std::string>> jobs = {
      {"/bin/sh", "-c", "exit 3"}, {"/bin/true"}, {"/bin/sh", "-c", "exit 7"}};
  auto results = RunProcesses(jobs, 2);
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 3u);
  EXPECT_TRUE((*results)[0].ExitedWith(3));
  EXPECT_TRUE((*results)[1].ExitedWith(0));
  EXPECT_TRUE((*results)[2].ExitedWith(7));
  for (const auto& r : *results) {
    EXPECT_GE(r.exit_ns, r.spawn_ns);
    EXPECT_GT(r.peak_rss_kib, 0u);
  }
}

TEST(RunProcesses, ReportsSpawnFailure) {
  auto results = RunProcesses({{"/nonexistent/binary"}}, 1);
  EXPECT_FALSE(results.ok());
}

}  // namespace
}  // namespace dsec::bench
