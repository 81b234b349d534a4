// SPDX-License-Identifier: Apache-2.0
#include "vmm/base/logging.h"

#include "gtest/gtest.h"

namespace dsec::log {
namespace {

constexpr int64_t kSec = 1'000'000'000;

TEST(SiteLimiter, AdmitsBudgetPerSecondAndReportsSuppressed) {
  SiteLimiter limiter(3);
  uint64_t suppressed = 0;
  int admitted = 0;
  for (int i = 0; i < 10; ++i) admitted += limiter.AllowAt(5 * kSec, &suppressed) ? 1 : 0;
  EXPECT_EQ(admitted, 3);
  // Next window: admitted again, and told how many were dropped.
  EXPECT_TRUE(limiter.AllowAt(6 * kSec + 1, &suppressed));
  EXPECT_EQ(suppressed, 7u);
  EXPECT_TRUE(limiter.AllowAt(6 * kSec + 2, &suppressed));
  EXPECT_EQ(suppressed, 0u);
}

TEST(Logging, RateLimitedMacroCompilesAndRuns) {
  for (int i = 0; i < 100; ++i) DSEC_LOG_RATELIMITED(debug, 5, "i={}", i);
  SetLevel("warn");
  EXPECT_EQ(Get()->level(), spdlog::level::warn);
  SetLevel("bogus");
  EXPECT_EQ(Get()->level(), spdlog::level::warn);
  SetLevel("info");
}

}  // namespace
}  // namespace dsec::log
