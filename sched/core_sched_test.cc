// SPDX-License-Identifier: Apache-2.0
#include "sched/core_sched.h"

#include <cerrno>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "base/status.h"
#include "sched/fake_sched_core_ops.h"
#include "sched/thread_placement.h"

namespace dsec::sched {
namespace {

using ::testing::HasSubstr;
using testing::FakeSchedCoreOps;

TEST(CoreSchedTest, ProbeMapsKernelRefusalsToUnavailable) {
  for (int err : {EINVAL, ENODEV, ENOSYS, EPERM}) {
    FakeSchedCoreOps ops(err);
    absl::Status s = ProbeCoreScheduling(ops);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << err;
    EXPECT_THAT(std::string(s.message()), HasSubstr("PR_SCHED_CORE"));
  }
}

TEST(CoreSchedTest, ProbeNamesTheErrnoItGot) {
  FakeSchedCoreOps ops(EINVAL);
  EXPECT_THAT(std::string(ProbeCoreScheduling(ops).message()), HasSubstr("EINVAL"));
}

TEST(CoreSchedTest, ProbeSucceedsWhenTheKernelAnswers) {
  FakeSchedCoreOps ops;
  EXPECT_TRUE(ProbeCoreScheduling(ops).ok());
}

TEST(CoreSchedTest, CreateFailureIsUnavailable) {
  FakeSchedCoreOps ops(/*fail_errno=*/0, /*fail_create_errno=*/EPERM);
  auto cookie = CoreSchedCookie::CreateForCurrentThread(ops);
  EXPECT_EQ(cookie.status().code(), absl::StatusCode::kUnavailable);
}

TEST(CoreSchedTest, OtherThreadsJoinTheCreatorsCookie) {
  FakeSchedCoreOps ops;
  auto cookie = CoreSchedCookie::CreateForCurrentThread(ops);
  ASSERT_TRUE(cookie.ok()) << cookie.status();
  EXPECT_EQ(cookie->holder_tid(), CurrentThreadId());
  pid_t other = 0;
  std::thread t([&] {
    other = CurrentThreadId();
    DSEC_CHECK_OK(cookie->JoinCurrentThread());
  });
  t.join();
  EXPECT_NE(cookie->value(), 0u);
  EXPECT_EQ(ops.CookieOf(other), cookie->value());
}

TEST(CoreSchedTest, ShareToRequiresTheCallerToCarryTheCookie) {
  FakeSchedCoreOps ops;
  auto cookie = CoreSchedCookie::CreateForCurrentThread(ops);
  ASSERT_TRUE(cookie.ok());
  EXPECT_TRUE(cookie->ShareTo(4242, CoreSchedScope::kThreadGroup).ok());
  EXPECT_EQ(ops.CookieOf(4242), cookie->value());
  absl::Status from_stranger;
  std::thread t([&] { from_stranger = cookie->ShareTo(4243, CoreSchedScope::kThread); });
  t.join();
  EXPECT_EQ(from_stranger.code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CoreSchedTest, MapsOtherErrnosByMeaning) {
  // ESRCH: the holder (or target) thread has exited.
  EXPECT_EQ(SchedCoreErrno("SHARE_FROM", ESRCH).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(SchedCoreErrno("SHARE_FROM", EFAULT).code(), absl::StatusCode::kInternal);
}

TEST(CoreSchedTest, RealKernelProbeIsOkOrUnavailable) {
  absl::Status s = ProbeCoreScheduling(SystemSchedCoreOps());
  EXPECT_TRUE(s.ok() || absl::IsUnavailable(s)) << s;
}

}  // namespace
}  // namespace dsec::sched
