// SPDX-License-Identifier: Apache-2.0
// VM lifecycle on real KVM: pause/resume, host-requested stop, timeout, and
// that a VM leaves no thread or file descriptor behind.
#include <poll.h>

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
  // ~100 timer ticks: long enough to pause in the middle.
  auto vm = Vm::Create(Config("ticks:100"));
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->Start().ok());
  ASSERT_TRUE(WaitFor(**vm, [&] { return !(*vm)->TestMessages().empty(); }, 20'000));
  ASSERT_TRUE((*vm)->Pause().ok());
  EXPECT_TRUE((*vm)->paused());
  // While paused no vCPU runs: the guest cannot finish or report anything.
  size_t before = (*vm)->TestMessages().size();
  pollfd p{(*vm)->stop_requested_fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 300), 0) << "the VM stopped while paused";
  EXPECT_EQ((*vm)->TestMessages().size(), before);
  ASSERT_TRUE((*vm)->Resume().ok());
  EXPECT_FALSE((*vm)->Resume().ok());  // not paused any more
  VmStats stats = (*vm)->Wait();
  EXPECT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
}

TEST_F(VmLifecycleTest, HostStopEndsARunningGuestPromptly) {
  auto vm = Vm::Create(Config("spin:1000000000000"));
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->Start().ok());
  ASSERT_TRUE(WaitFor(**vm, [&] { return !(*vm)->TestMessages().empty(); }, 20'000));
  int64_t t0 = MonotonicNowNs();
  (*vm)->RequestStop(StopReason::kHostRequest, "test");
  VmStats stats = (*vm)->Wait();
  EXPECT_EQ(stats.stop.reason, StopReason::kHostRequest);
  EXPECT_LT(MonotonicNowNs() - t0, 2'000'000'000) << "stopping a spinning guest took too long";
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
