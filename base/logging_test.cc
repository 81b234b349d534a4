// SPDX-License-Identifier: Apache-2.0
#include "base/logging.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "spdlog/spdlog.h"

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

// Call sites pack their arguments; logging.cc formats them. What is below
// the level is neither formatted nor written.
TEST(Logging, MessagesAreFormattedAndFilteredByLevel) {
  char path[] = "/tmp/dsec-log-testXXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  ASSERT_TRUE(LogToFile(path));
  SetLevel("info");
  EXPECT_FALSE(Enabled(Level::debug));
  EXPECT_TRUE(Enabled(Level::warn));
  std::string name = "sb-1";
  DSEC_LOG(warn, "sandbox={} dropped_bytes={} ratio={:.2f} ok={}", name, uint64_t{4096}, 2.5, true);
  DSEC_LOG(debug, "hidden={}", 1);
  DSEC_LOG(err, "plain");
  Get()->flush();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(path);
  EXPECT_NE(text.str().find(" W sandbox=sb-1 dropped_bytes=4096 ratio=2.50 ok=true\n"), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find(" E plain\n"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("hidden"), std::string::npos) << text.str();
}

}  // namespace
}  // namespace dsec::log
