// SPDX-License-Identifier: Apache-2.0
// Boots the test guest's `smp` workload in-process through vm::Vm on real
// KVM: the BSP starts every AP listed in the MP table with INIT/STARTUP IPIs
// (guest-kernel/testguest/smp.c), each AP reports `cpu id=K online`, and the
// BSP reports how many came up. This exercises the monitor's multi-vCPU path
// end to end: APs created in wait-for-SIPI, the in-kernel LAPIC delivering
// the guest's IPIs, and concurrent test-device reports from several vCPUs.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/test_support.h"
#include "vmm/vm/vm.h"

namespace dsec::vm {
namespace {

using dsec::testing::FirstReportOf;
using dsec::testing::ReportsOf;

class TestguestSmpTest : public ::testing::TestWithParam<uint32_t> {
 protected:
  void SetUp() override {
    std::string why = dsec::testing::KvmUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << why;
  }

  VmConfig Config(const std::string& workload, uint32_t vcpus) {
    VmConfig c;
    c.kernel_path = dsec::testing::TestGuestPath();
    c.cmdline = "console=ttyS0 testguest.run=" + workload;
    c.mem_mib = 64;
    c.vcpus = vcpus;
    c.console.kind = ConsoleConfig::Kind::kNone;
    c.timeout_ms = 60'000;  // a hung guest fails the test instead of hanging it
    return c;
  }

  // Boots, waits, returns the stats; the messages land in *messages.
  VmStats Boot(const VmConfig& config, std::vector<std::string>* messages) {
    auto vm = Vm::Create(config);
    EXPECT_TRUE(vm.ok()) << vm.status();
    if (!vm.ok()) return {};
    EXPECT_TRUE((*vm)->Start().ok());
    VmStats stats = (*vm)->Wait();
    *messages = (*vm)->TestMessages();
    return stats;
  }
};

// The guest reports every CPU, the BSP included, exactly once. The MP table
// the monitor writes numbers the APIC ids 0..N-1.
TEST_P(TestguestSmpTest, SmpBringsEveryApOnline) {
  const uint32_t n = GetParam();
  std::vector<std::string> msgs;
  VmStats stats = Boot(Config("smp", n), &msgs);
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  EXPECT_EQ(stats.stop.guest_exit_code, 0u);

  auto cpus = FirstReportOf(msgs, "cpus");
  ASSERT_TRUE(cpus.has_value());
  EXPECT_EQ(cpus->GetU64("count"), n);

  // Every APIC id exactly once, each line exactly "cpu id=K online" (the
  // trailing bare word is not a key=value field, so check the raw line).
  std::multiset<uint64_t> online;
  for (const auto& r : ReportsOf(msgs, "cpu")) online.insert(r.GetU64("id"));
  std::multiset<uint64_t> expected;
  for (uint64_t k = 0; k < n; ++k) expected.insert(k);
  EXPECT_EQ(online, expected);
  for (uint64_t k = 0; k < n; ++k) {
    std::string line = "cpu id=" + std::to_string(k) + " online";
    EXPECT_EQ(std::count(msgs.begin(), msgs.end(), line), 1) << line;
  }

  auto result = FirstReportOf(msgs, "result");
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->Get("workload"), "smp");
  EXPECT_EQ(result->GetU64("cpus"), n);
  EXPECT_EQ(result->GetU64("online"), n);
  EXPECT_TRUE(ReportsOf(msgs, "error").empty());
  EXPECT_TRUE(ReportsOf(msgs, "fault").empty());
}

INSTANTIATE_TEST_SUITE_P(Vcpus, TestguestSmpTest, ::testing::Values(2u, 4u),
                         [](const ::testing::TestParamInfo<uint32_t>& info) {
                           return std::to_string(info.param) + "Vcpus";
                         });

// One vCPU: nothing to start, the workload passes with the BSP alone.
TEST_F(TestguestSmpTest, OneVcpuPassesWithTheBspAlone) {
  std::vector<std::string> msgs;
  VmStats stats = Boot(Config("smp", 1), &msgs);
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  EXPECT_EQ(stats.stop.guest_exit_code, 0u);
  auto result = FirstReportOf(msgs, "result");
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->GetU64("cpus"), 1u);
  EXPECT_EQ(result->GetU64("online"), 1u);
}

}  // namespace
}  // namespace dsec::vm
