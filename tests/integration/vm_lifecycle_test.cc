// SPDX-License-Identifier: Apache-2.0
// VM lifecycle on real KVM: pause/resume, host-requested stop, timeout, and
// that a VM leaves no thread or file descriptor behind. Nothing here
// depends on how fast the host is: what a paused VM does not do is seen in
// its threads' states, and a stop by its completion, with deadlines only
// to fail a test that would otherwise hang.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_support.h"
#include "vmm/vm/vm.h"

namespace dsec::vm {
namespace {

class VmLifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = dsec::testing::KvmUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << why;
  }
  VmConfig Config(const std::string& workload) {
    VmConfig c;
    c.kernel_path = dsec::testing::TestGuestPath();
    c.cmdline = "testguest.run=" + workload;
    c.mem_mib = 32;
    c.console.kind = ConsoleConfig::Kind::kNone;
    c.timeout_ms = 60'000;
    return c;
  }
};

// Waits until `pred` holds or `deadline_ms` passes, polling the VM's stop fd
// so a VM that dies early ends the wait.
template <typename Pred>
bool WaitFor(Vm& vm, Pred pred, int deadline_ms) {
  const int64_t end = MonotonicNowNs() + int64_t{deadline_ms} * 1'000'000;
  while (!pred()) {
    if (MonotonicNowNs() >= end) return false;
    pollfd p{vm.stop_requested_fd(), POLLIN, 0};
    ::poll(&p, 1, 5);
  }
  return true;
}

TEST_F(VmLifecycleTest, PauseStopsTheGuestAndResumeContinuesIt) {
  // ~100 timer ticks, spun through with `pause` (never HLT): while it runs
  // its vCPU thread is runnable. Long enough to pause in the middle.
  auto vm = Vm::Create(Config("ticks:100"));
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->Start().ok());
  ASSERT_TRUE(WaitFor(**vm, [&] { return !(*vm)->TestMessages().empty(); }, 20'000));
  ASSERT_TRUE((*vm)->Pause().ok());
  EXPECT_TRUE((*vm)->paused());
  // Paused, no vCPU runs the guest: every vCPU thread sleeps in the pause
  // wait (state S), where a running one is never seen asleep. The state
  // changes without an event: it is re-read until a failure deadline.
  const std::vector<pid_t> tids = (*vm)->VcpuThreadIds();
  ASSERT_FALSE(tids.empty());
  std::string states;
  auto all_asleep = [&] {
    states.clear();
    for (pid_t tid : tids) states += dsec::testing::ThreadState(tid);
    return states.find_first_not_of('S') == std::string::npos;
  };
  EXPECT_TRUE(WaitFor(**vm, all_asleep, 20'000)) << "vCPU thread states while paused: " << states;
  // So the guest cannot have finished, nor reported its end.
  pollfd p{(*vm)->stop_requested_fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "the VM stopped while paused";
  ASSERT_TRUE((*vm)->Resume().ok());
  EXPECT_FALSE((*vm)->Resume().ok());  // not paused any more
  // Resumed, the guest runs its workload to its end.
  VmStats stats = (*vm)->Wait();
  EXPECT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  auto result = dsec::testing::FirstReportOf((*vm)->TestMessages(), "result");
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->Get("workload"), "ticks");
}

TEST_F(VmLifecycleTest, TheGuestsClockStandsStillWhilePaused) {
  auto vm = Vm::Create(Config("ticks:100"));
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->Start().ok());
  ASSERT_TRUE(WaitFor(**vm, [&] { return !(*vm)->TestMessages().empty(); }, 20'000));
  ASSERT_TRUE((*vm)->Pause().ok());
  auto at_pause = (*vm)->GuestClockNs();
  ASSERT_TRUE(at_pause.ok()) << at_pause.status();
  // A second pause of a paused VM keeps the first one's clock.
  ::usleep(100'000);
  ASSERT_TRUE((*vm)->Pause().ok());
  const int64_t host_before = MonotonicNowNs();
  ::usleep(400'000);
  ASSERT_TRUE((*vm)->Resume().ok());
  auto at_resume = (*vm)->GuestClockNs();
  const int64_t host_paused = MonotonicNowNs() - host_before;
  ASSERT_TRUE(at_resume.ok()) << at_resume.status();
  ASSERT_GE(host_paused, 400'000'000);
  // kvmclock ran on meanwhile (it counts host time), so without the put
  // back the guest's clock would be at least 500 ms on; with it, only the
  // time from the resume to the read.
  const int64_t moved = static_cast<int64_t>(*at_resume) - static_cast<int64_t>(*at_pause);
  EXPECT_LT(moved, 200'000'000) << "the guest's clock moved " << moved / 1'000'000 << " ms over a "
      << host_paused / 1'000'000 << " ms pause";
  // And it runs again once resumed.
  ::usleep(50'000);
  auto later = (*vm)->GuestClockNs();
  ASSERT_TRUE(later.ok());
  EXPECT_GE(static_cast<int64_t>(*later) - static_cast<int64_t>(*at_resume), 50'000'000);
  VmStats stats = (*vm)->Wait();
  EXPECT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
}

TEST_F(VmLifecycleTest, HostStopEndsARunningGuest) {
  VmConfig config = Config("spin:1000000000000");
  // The VM's own deadline lies past the test's failure deadline below: only
  // the request can end this guest in time.
  config.timeout_ms = 150'000;
  auto vm = Vm::Create(config);
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->Start().ok());
  ASSERT_TRUE(WaitFor(**vm, [&] { return !(*vm)->TestMessages().empty(); }, 20'000));
  (*vm)->RequestStop(StopReason::kHostRequest, "test");
  // Wait() returns once every VM thread is joined: the stop is complete.
  // It runs on a helper so that a stop that never completes fails at a
  // generous deadline (the helper then ends with the VM's own deadline).
  std::future<VmStats> stopped = std::async(std::launch::async, [&] { return (*vm)->Wait(); });
  ASSERT_EQ(stopped.wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "a spinning guest did not stop on request";
  EXPECT_EQ(stopped.get().stop.reason, StopReason::kHostRequest);
  // A second request does not change the recorded reason.
  (*vm)->RequestStop(StopReason::kTimeout, "late");
  EXPECT_EQ((*vm)->Wait().stop.reason, StopReason::kHostRequest);
}

TEST_F(VmLifecycleTest, TimeoutStopsAGuestThatNeverEnds) {
  VmConfig config = Config("spin:1000000000000");
  config.timeout_ms = 300;
  auto vm = Vm::Create(config);
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->Start().ok());
  VmStats stats = (*vm)->Wait();
  EXPECT_EQ(stats.stop.reason, StopReason::kTimeout);
}

TEST_F(VmLifecycleTest, PauseResumeAndStopOnTwoVcpus) {
  VmConfig config = Config("spin:1000000000000");
  config.vcpus = 2;
  auto vm = Vm::Create(config);
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->Start().ok());
  // The second vCPU sits in the in-kernel LAPIC waiting for SIPI; pausing
  // must still collect it.
  ASSERT_TRUE((*vm)->Pause().ok());
  ASSERT_TRUE((*vm)->Resume().ok());
  (*vm)->RequestStop(StopReason::kHostRequest, "test");
  EXPECT_EQ((*vm)->Wait().stop.reason, StopReason::kHostRequest);
}

TEST_F(VmLifecycleTest, LeavesNoThreadOrFileDescriptorBehind) {
  // Warm up process-wide one-time state (logger, signal handler).
  {
    auto vm = Vm::Create(Config("boot"));
    ASSERT_TRUE(vm.ok()) << vm.status();
    ASSERT_TRUE((*vm)->Start().ok());
    (*vm)->Wait();
  }
  const int fds = dsec::testing::CountOpenFds();
  const int threads = dsec::testing::CountThreads();
  for (int i = 0; i < 3; ++i) {
    VmConfig config = Config(i == 1 ? "triple-fault" : "boot");
    config.vcpus = 2;
    auto vm = Vm::Create(config);
    ASSERT_TRUE(vm.ok()) << vm.status();
    ASSERT_TRUE((*vm)->Start().ok());
    (*vm)->Wait();
  }
  // Also a VM destroyed while running.
  {
    auto vm = Vm::Create(Config("spin:1000000000000"));
    ASSERT_TRUE(vm.ok()) << vm.status();
    ASSERT_TRUE((*vm)->Start().ok());
  }
  // And one that was created but never started.
  { ASSERT_TRUE(Vm::Create(Config("boot")).ok()); }
  EXPECT_EQ(dsec::testing::CountOpenFds(), fds);
  EXPECT_EQ(dsec::testing::CountThreads(), threads);
}

TEST_F(VmLifecycleTest, RejectsBadConfigurationBeforeTouchingKvm) {
  VmConfig config = Config("boot");
  config.vcpus = 0;
  EXPECT_EQ(Vm::Create(config).status().code(), absl::StatusCode::kInvalidArgument);
  config = Config("boot");
  config.mem_mib = 1;
  EXPECT_EQ(Vm::Create(config).status().code(), absl::StatusCode::kInvalidArgument);
  config = Config("boot");
  config.kernel_path = "/nonexistent/vmlinux";
  auto s = Vm::Create(config).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("/nonexistent/vmlinux"), std::string_view::npos);
}

}  // namespace
}  // namespace dsec::vm
