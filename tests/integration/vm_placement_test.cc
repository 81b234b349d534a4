// SPDX-License-Identifier: Apache-2.0
// `--qos` on real threads: every vCPU thread is pinned where the placement
// engine said and isolated (core-scheduling cookie, or here, a cpuset
// cgroup), and the sandbox's cgroup is gone once the VM is.
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/integration/test_support.h"
#include "vmm/vm/vm.h"

namespace dsec::vm {
namespace {

std::vector<int> AffinityOf(pid_t tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(tid, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

// The cpuset cgroup path of a thread ("" if the v1 cpuset line is absent).
std::string CpusetCgroupOf(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    auto first = line.find(':');
    auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    if (controllers.find("cpuset") != std::string::npos) return line.substr(second + 1);
  }
  return "";
}

class VmPlacementTest : public ::testing::TestWithParam<sched::QosClass> {
 protected:
  void SetUp() override {
    std::string why = dsec::testing::KvmUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(VmPlacementTest, VcpuThreadsArePinnedAndIsolatedBeforeTheyRun) {
  VmConfig config;
  config.kernel_path = dsec::testing::TestGuestPath();
  config.cmdline = "testguest.run=spin:1000000000000";
  config.mem_mib = 32;
  config.console.kind = ConsoleConfig::Kind::kNone;
  config.timeout_ms = 60'000;
  config.qos = GetParam();
  auto vm = Vm::Create(config);
  if (!vm.ok() && vm.status().code() == absl::StatusCode::kResourceExhausted) {
    GTEST_SKIP() << "placement refused on this host: " << vm.status();
  }
  ASSERT_TRUE(vm.ok()) << vm.status();
  auto info = (*vm)->placement();
  ASSERT_TRUE(info.has_value());
  ASSERT_EQ(info->vcpu_cpus.size(), 1u);
  ASSERT_TRUE((*vm)->Start().ok());
  // Wait until the guest runs at CPL3: the pre-run hook ran before that.
  pollfd p{(*vm)->stop_requested_fd(), POLLIN, 0};
  for (int i = 0; i < 2000 && (*vm)->TestMessages().empty(); ++i) ::poll(&p, 1, 5);
  ASSERT_FALSE((*vm)->TestMessages().empty());
  pid_t tid = (*vm)->VcpuThreadIds()[0];
  ASSERT_GT(tid, 0);
  EXPECT_EQ(AffinityOf(tid), std::vector<int>{info->vcpu_cpus[0]});
  std::string cgroup;
  if (info->mechanism == "cpuset") {
    cgroup = CpusetCgroupOf(tid);
    EXPECT_NE(cgroup.find("dsec"), std::string::npos) << cgroup;
  }
  (*vm)->RequestStop(StopReason::kHostRequest, "test done");
  (*vm)->Wait();
  vm->reset();
  if (!cgroup.empty()) {
    EXPECT_FALSE(std::filesystem::exists("/sys/fs/cgroup/cpuset" + cgroup))
        << "sandbox cgroup left behind: " << cgroup;
  }
}

INSTANTIATE_TEST_SUITE_P(Qos, VmPlacementTest,
                         ::testing::Values(sched::QosClass::kLatencySensitive,
                                           sched::QosClass::kBestEffort),
                         [](const auto& info) {
                           return std::string(sched::QosClassName(info.param));
                         });

}  // namespace
}  // namespace dsec::vm
