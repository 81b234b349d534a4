// SPDX-License-Identifier: Apache-2.0
// Real threads, real affinity, real cpuset cgroups (removed even when a
// test fails: SandboxIsolation owns them), real prctl where it exists.
#include <unistd.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "base/status.h"
#include "sched/core_sched.h"
#include "sched/fake_sched_core_ops.h"
#include "sched/isolation.h"
#include "sched/placement.h"
#include "base/file_io.h"
#include "sched/thread_placement.h"
#include "sched/topology.h"

namespace dsec::sched {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Runs `fn` on a fresh thread and joins it, so that placing that thread
// never changes the test's own thread.
void OnNewThread(const std::function<void()>& fn) {
  std::thread t(fn);
  t.join();
}

std::string ThreadCgroupLine(const char* controller) {
  std::ifstream in("/proc/thread-self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(std::string(":") + controller + ":") != std::string::npos) return line;
  }
  return "";
}

std::unique_ptr<PlacementEngine> HostEngine() {
  auto topology = Topology::Read("/");
  DSEC_CHECK_OK(topology.status());
  auto engine = PlacementEngine::Create(*std::move(topology));
  DSEC_CHECK_OK(engine.status());
  return *std::move(engine);
}

// Skips unless this process can create cpuset cgroups.
#define SKIP_WITHOUT_CPUSET_CGROUPS()                                              \
  do {                                                                             \
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to create cpuset cgroups";   \
    auto layout = DetectCgroupLayout();                                            \
    if (!layout.ok() || !layout->cpuset) GTEST_SKIP() << "no cpuset controller";   \
  } while (0)

TEST(SchedIntegrationTest, ThreadsArePinnedAsPlanned) {
  auto engine = HostEngine();
  auto ls = engine->Place({"ls", QosClass::kLatencySensitive, 1});
  ASSERT_TRUE(ls.ok()) << ls.status();
  auto be = engine->Place({"be", QosClass::kBestEffort, 1});
  ASSERT_TRUE(be.ok()) << be.status();
  for (const Placement* p : {&*ls, &*be}) {
    std::vector<int> seen;
    absl::Status applied;
    OnNewThread([&] {
      applied = ApplyToCurrentThread(ThreadPlacement{.cpus = {p->vcpu_cpus[0]}});
      seen = CurrentThreadAffinity().value_or(std::vector<int>{});
    });
    ASSERT_TRUE(applied.ok()) << applied;
    EXPECT_EQ(seen, std::vector<int>{p->vcpu_cpus[0]}) << p->sandbox;
  }
  EXPECT_NE(ls->vcpu_cpus[0], be->vcpu_cpus[0]);
}

TEST(SchedIntegrationTest, CpusetCgroupConfinesAThreadAndIsRemovedWithTheSandbox) {
  SKIP_WITHOUT_CPUSET_CGROUPS();
  auto engine = HostEngine();
  auto be = engine->Place({"be", QosClass::kBestEffort, 1});
  ASSERT_TRUE(be.ok()) << be.status();
  IsolationOptions options;
  options.force = IsolationMechanism::kCpusetPartitioning;
  auto isolator = Isolator::Create(options);
  ASSERT_TRUE(isolator.ok()) << isolator.status();
  auto sandbox = (*isolator)->Isolate(*be);
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  const std::string dir = (*sandbox)->cgroup()->cpuset_dir().path();
  const std::string name = (*sandbox)->cgroup()->name();
  EXPECT_TRUE(PathExists(dir));
  auto cpus = (*sandbox)->cgroup()->cpuset_dir().Read("cpuset.cpus");
  ASSERT_TRUE(cpus.ok());
  EXPECT_EQ(*cpus, std::to_string(be->cpus[0]) + "\n");
  if (const CgroupDir* cpu = (*sandbox)->cgroup()->cpu_dir()) {
    EXPECT_EQ(cpu->Read("cpu.shares").value_or(""), "64\n");
  }

  // A thread moves in, and is still inside when the sandbox is torn down.
  absl::Notification placed, torn_down;
  absl::Status applied;
  std::string line_inside, line_after;
  std::vector<int> affinity;
  std::thread member([&] {
    applied = ApplyToCurrentThread((*sandbox)->ForVcpu(0));
    line_inside = ThreadCgroupLine("cpuset");
    affinity = CurrentThreadAffinity().value_or(std::vector<int>{});
    placed.Notify();
    torn_down.WaitForNotification();
    line_after = ThreadCgroupLine("cpuset");
  });
  placed.WaitForNotification();
  auto tasks = (*sandbox)->cgroup()->cpuset_dir().Read("tasks");
  sandbox->reset();  // removes the cgroup, moving the member out first
  torn_down.Notify();
  member.join();

  ASSERT_TRUE(applied.ok()) << applied;
  EXPECT_THAT(line_inside, HasSubstr(name));
  EXPECT_EQ(affinity, be->vcpu_cpus);
  EXPECT_FALSE(tasks.value_or("").empty());
  EXPECT_FALSE(PathExists(dir));
  EXPECT_THAT(line_after, Not(HasSubstr(name)));
}

TEST(SchedIntegrationTest, RefusedCookieFallsBackToARealCpuset) {
  SKIP_WITHOUT_CPUSET_CGROUPS();
  // The probe succeeds but CREATE is refused with EPERM (as under a seccomp
  // filter): the sandbox must still be isolated, by a cpuset.
  testing::FakeSchedCoreOps ops(0, EPERM);
  auto isolator = Isolator::Create({}, ops);
  ASSERT_TRUE(isolator.ok()) << isolator.status();
  ASSERT_EQ((*isolator)->mechanism(), IsolationMechanism::kCoreScheduling);
  auto engine = HostEngine();
  auto ls = engine->Place({"ls", QosClass::kLatencySensitive, 1});
  ASSERT_TRUE(ls.ok());
  auto sandbox = (*isolator)->Isolate(*ls);
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  EXPECT_EQ((*sandbox)->mechanism(), IsolationMechanism::kCpusetPartitioning);
  const std::string dir = (*sandbox)->cgroup()->cpuset_dir().path();
  absl::Status applied;
  OnNewThread([&] { applied = ApplyToCurrentThread((*sandbox)->ForVcpu(0)); });
  EXPECT_TRUE(applied.ok()) << applied;
  EXPECT_EQ((*isolator)->metrics().core_sched_fallbacks, 1u);
  sandbox->reset();
  EXPECT_FALSE(PathExists(dir));
}

TEST(SchedIntegrationTest, ThreadsOfOneSandboxShareOneCookie) {
  absl::Status probe = ProbeCoreScheduling(SystemSchedCoreOps());
  if (!probe.ok()) GTEST_SKIP() << probe.message();
  // Create on a dedicated holder thread so the test thread keeps its own.
  absl::Notification created, done;
  absl::StatusOr<CoreSchedCookie> cookie = absl::UnknownError("not created");
  std::thread holder([&] {
    cookie = CoreSchedCookie::CreateForCurrentThread();
    created.Notify();
    done.WaitForNotification();
  });
  created.WaitForNotification();
  std::vector<absl::StatusOr<bool>> carries;
  if (cookie.ok()) {
    for (int i = 0; i < 2; ++i) {
      OnNewThread([&] {
        absl::Status joined = ApplyToCurrentThread(ThreadPlacement{.cookie = &*cookie});
        carries.push_back(joined.ok() ? cookie->CurrentThreadCarries() : joined);
      });
    }
  }
  done.Notify();
  holder.join();
  ASSERT_TRUE(cookie.ok()) << cookie.status();
  ASSERT_EQ(carries.size(), 2u);
  for (const auto& c : carries) {
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(*c);
  }
}

}  // namespace
}  // namespace dsec::sched
