// SPDX-License-Identifier: Apache-2.0
// `--qos` on real threads: every vCPU thread is pinned where the placement
// engine said and isolated (core-scheduling cookie, or here, a cpuset
// cgroup), and the sandbox's cgroup is gone once the VM is.
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
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

// Where a thread's cpuset cgroup is: the hierarchy's mount point and the
// path below it. The v1 cpuset line when there is one; otherwise the v2
// line ("0::/path"), when the v2 hierarchy offers cpuset (Linux 6.12 has
// no v1 cpuset at all unless CONFIG_CPUSETS_V1). Empty if neither.
struct CpusetCgroup {
  std::string root;
  std::string path;
  std::string dir() const { return root + path; }
};

std::string CgroupV2Root() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // "... mountpoint options - cgroup2 source options"
    size_t dash = line.find(" - cgroup2 ");
    if (dash == std::string::npos) continue;
    std::istringstream fields(line.substr(0, dash));
    std::string f, mount_point;
    for (int i = 0; i < 5 && fields >> f; ++i) mount_point = f;
    return mount_point;
  }
  return "";
}

CpusetCgroup CpusetCgroupOf(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/cgroup");
  std::string line;
  std::string v2_path;
  while (std::getline(in, line)) {
    auto first = line.find(':');
    auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    if (controllers.find("cpuset") != std::string::npos) {
      return {"/sys/fs/cgroup/cpuset", line.substr(second + 1)};
    }
    if (line.rfind("0::", 0) == 0) v2_path = line.substr(3);
  }
  const std::string v2 = CgroupV2Root();
  std::ifstream controllers(v2 + "/cgroup.controllers");
  std::string word;
  while (!v2.empty() && controllers >> word) {
    if (word == "cpuset") return {v2, v2_path};
  }
  return {};
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
  CpusetCgroup cgroup;
  if (info->mechanism == "cpuset") {
    cgroup = CpusetCgroupOf(tid);
    EXPECT_NE(cgroup.path.find("dsec"), std::string::npos) << cgroup.dir();
  }
  (*vm)->RequestStop(StopReason::kHostRequest, "test done");
  (*vm)->Wait();
  vm->reset();
  if (!cgroup.path.empty()) {
    EXPECT_FALSE(std::filesystem::exists(cgroup.dir()))
        << "sandbox cgroup left behind: " << cgroup.dir();
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
