// SPDX-License-Identifier: Apache-2.0
#include "sched/isolation.h"

#include <cerrno>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sched/fake_sched_core_ops.h"

namespace dsec::sched {
namespace {

using ::testing::HasSubstr;
using testing::FakeSchedCoreOps;

CgroupLayout V1Layout() {
  CgroupLayout layout;
  layout.cpuset = ControllerMount{CgroupVersion::kV1, "/sys/fs/cgroup/cpuset", "/"};
  layout.cpu = ControllerMount{CgroupVersion::kV1, "/sys/fs/cgroup/cpu", "/"};
  return layout;
}

constexpr char kSelfCgroup[] = "3:cpuset:/\n1:cpu:/\n0::/\n";

Placement LsPlacement() {
  Placement p;
  p.sandbox = "ls-1";
  p.qos = QosClass::kLatencySensitive;
  p.cpus = {0, 4};
  p.vcpu_cpus = {0, 4};
  p.mems = {0};
  return p;
}

TEST(IsolatorTest, FallsBackToCpusetsWhenPrctlSaysEinval) {
  FakeSchedCoreOps ops(EINVAL);
  auto iso = Isolator::CreateWith({}, ops, V1Layout(), kSelfCgroup);
  ASSERT_TRUE(iso.ok()) << iso.status();
  EXPECT_EQ((*iso)->mechanism(), IsolationMechanism::kCpusetPartitioning);
  EXPECT_THAT((*iso)->reason(), HasSubstr("EINVAL"));
  EXPECT_THAT((*iso)->reason(), HasSubstr("cpuset controller v1 at /sys/fs/cgroup/cpuset"));
  SchedMetrics m = (*iso)->metrics();
  EXPECT_EQ(m.mechanism, IsolationMechanism::kCpusetPartitioning);
  EXPECT_FALSE(m.core_sched_available);
}

TEST(IsolatorTest, FallsBackOnEveryRefusalErrno) {
  for (int err : {ENODEV, EPERM, ENOSYS}) {
    FakeSchedCoreOps ops(err);
    auto iso = Isolator::CreateWith({}, ops, V1Layout(), kSelfCgroup);
    ASSERT_TRUE(iso.ok()) << iso.status();
    EXPECT_EQ((*iso)->mechanism(), IsolationMechanism::kCpusetPartitioning) << err;
  }
}

TEST(IsolatorTest, ChoosesCoreSchedulingWhenTheKernelHasIt) {
  FakeSchedCoreOps ops;
  auto iso = Isolator::CreateWith({}, ops, V1Layout(), kSelfCgroup);
  ASSERT_TRUE(iso.ok()) << iso.status();
  EXPECT_EQ((*iso)->mechanism(), IsolationMechanism::kCoreScheduling);
  EXPECT_TRUE((*iso)->metrics().core_sched_available);
}

TEST(IsolatorTest, UnavailableWhenNeitherMechanismExists) {
  FakeSchedCoreOps ops(EINVAL);
  auto iso = Isolator::CreateWith({}, ops, CgroupLayout{}, kSelfCgroup);
  EXPECT_EQ(iso.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(iso.status().message()), HasSubstr("no cpuset cgroup controller"));
}

TEST(IsolatorTest, ForcingCoreSchedulingOnAKernelWithoutItIsUnavailable) {
  FakeSchedCoreOps ops(EINVAL);
  IsolationOptions options;
  options.force = IsolationMechanism::kCoreScheduling;
  auto iso = Isolator::CreateWith(options, ops, V1Layout(), kSelfCgroup);
  EXPECT_EQ(iso.status().code(), absl::StatusCode::kUnavailable);
}

TEST(IsolatorTest, CoreSchedSandboxHandsVcpusItsCookieAndOneCpuEach) {
  FakeSchedCoreOps ops;
  auto iso = Isolator::CreateWith({}, ops, V1Layout(), kSelfCgroup);
  ASSERT_TRUE(iso.ok());
  auto sandbox = (*iso)->Isolate(LsPlacement());
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  EXPECT_EQ((*sandbox)->mechanism(), IsolationMechanism::kCoreScheduling);
  ThreadPlacement v1 = (*sandbox)->ForVcpu(1);
  EXPECT_EQ(v1.cpus, std::vector<int>{4});
  EXPECT_EQ(v1.cookie, (*sandbox)->cookie());
  EXPECT_EQ(v1.cgroup, nullptr);
  EXPECT_EQ((*sandbox)->ForSandboxThread().cpus, (std::vector<int>{0, 4}));
  // A container process gets the cookie pushed to its whole thread group.
  ASSERT_TRUE((*sandbox)->AddProcess(777).ok());
  EXPECT_EQ(ops.CookieOf(777), (*sandbox)->cookie()->value());
  EXPECT_EQ((*iso)->metrics().sandboxes_core_sched, 1u);
}

TEST(IsolatorTest, CookieCreationFailureFallsBackForThatSandbox) {
  // The probe works, CREATE is refused (e.g. a seccomp filter): the sandbox
  // goes to the cpuset fallback, here a parent that does not exist, so the
  // failure surfaces with the fallback counted.
  FakeSchedCoreOps ops(0, EPERM);
  IsolationOptions options;
  options.cpuset_parent = "/nonexistent-dsec-parent";
  options.cpu_parent = "/nonexistent-dsec-parent";
  auto iso = Isolator::CreateWith(options, ops, V1Layout(), kSelfCgroup);
  ASSERT_TRUE(iso.ok());
  auto sandbox = (*iso)->Isolate(LsPlacement());
  EXPECT_EQ(sandbox.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(sandbox.status().message()), HasSubstr("/nonexistent-dsec-parent"));
  SchedMetrics m = (*iso)->metrics();
  EXPECT_EQ(m.core_sched_fallbacks, 1u);
  EXPECT_EQ(m.isolate_failures, 1u);
}

}  // namespace
}  // namespace dsec::sched
