// SPDX-License-Identifier: Apache-2.0
// Boots the test guest in-process through vm::Vm on real KVM and checks what
// the guest reports about the machine it was given.
#include <sys/stat.h>

#include <fstream>

#include "gtest/gtest.h"
#include "tests/integration/test_support.h"
#include "vmm/vm/vm.h"

namespace dsec::vm {
namespace {

using dsec::testing::FirstReportOf;
using dsec::testing::ReportsOf;

constexpr uint64_t kMiB = 1 << 20;

class VmBootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = dsec::testing::KvmUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << why;
  }

  VmConfig Config(const std::string& workload, uint64_t mem_mib = 64, uint32_t vcpus = 1) {
    VmConfig c;
    c.kernel_path = dsec::testing::TestGuestPath();
    c.cmdline = "console=ttyS0 testguest.run=" + workload;
    c.mem_mib = mem_mib;
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

TEST_F(VmBootTest, BootsOneVcpuAndReportsMemoryMapCommandLineAndShutdown) {
  VmConfig config = Config("boot");
  config.cmdline += " marker=dsec-42 other=x";
  std::vector<std::string> msgs;
  VmStats stats = Boot(config, &msgs);
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  EXPECT_EQ(stats.stop.guest_exit_code, 0u);

  auto boot = FirstReportOf(msgs, "boot");
  ASSERT_TRUE(boot.has_value());
  EXPECT_EQ(boot->Get("protocol"), "linux64");
  auto cmdline = FirstReportOf(msgs, "cmdline");
  ASSERT_TRUE(cmdline.has_value());
  EXPECT_EQ(cmdline->Get("text"), config.cmdline);

  // The memory map the monitor promised: low RAM below the EBDA, the
  // EBDA/BIOS area reserved, RAM from 1 MiB to the end.
  auto e820 = ReportsOf(msgs, "e820");
  ASSERT_GE(e820.size(), 2u);
  EXPECT_EQ(e820[0].GetU64("count"), e820.size() - 1);
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> entries;
  for (size_t i = 1; i < e820.size(); ++i) {
    entries.emplace_back(e820[i].GetU64("addr"), e820[i].GetU64("size"), e820[i].GetU64("type"));
  }
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> expected = {
      {0, 0x9fc00, 1}, {0x9fc00, 0x100000 - 0x9fc00, 2}, {0x100000, 64 * kMiB - 0x100000, 1}};
  EXPECT_EQ(entries, expected);

  auto cpus = FirstReportOf(msgs, "cpus");
  ASSERT_TRUE(cpus.has_value());
  EXPECT_EQ(cpus->GetU64("count"), 1u);

  EXPECT_GT(stats.timestamps.first_insn_ns, 0);
  EXPECT_GE(stats.timestamps.first_user_ns, stats.timestamps.first_insn_ns);
  EXPECT_GE(stats.timestamps.stop_ns, stats.timestamps.first_user_ns);
}

TEST_F(VmBootTest, MemoryAboveTheHoleIsReportedAbove4GiB) {
  std::vector<std::string> msgs;
  VmStats stats = Boot(Config("boot", 3072 + 512), &msgs);
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  auto e820 = ReportsOf(msgs, "e820");
  ASSERT_GE(e820.size(), 2u);
  const auto& last = e820.back();
  EXPECT_EQ(last.GetU64("addr"), 4ull << 30);
  EXPECT_EQ(last.GetU64("size"), 512 * kMiB);
  EXPECT_EQ(last.GetU64("type"), 1u);
  // Nothing is reported inside the 32-bit MMIO hole.
  for (size_t i = 1; i < e820.size(); ++i) {
    uint64_t a = e820[i].GetU64("addr"), s = e820[i].GetU64("size");
    EXPECT_TRUE(a + s <= 0xC0000000ull || a >= (4ull << 30)) << "entry " << i;
  }
}

TEST_F(VmBootTest, PvhEntryBootsTheSameGuest) {
  VmConfig config = Config("boot");
  config.boot = BootProtocolChoice::kPvh;
  std::vector<std::string> msgs;
  VmStats stats = Boot(config, &msgs);
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  auto boot = FirstReportOf(msgs, "boot");
  ASSERT_TRUE(boot.has_value());
  EXPECT_EQ(boot->Get("protocol"), "pvh");
  auto cmdline = FirstReportOf(msgs, "cmdline");
  ASSERT_TRUE(cmdline.has_value());
  EXPECT_EQ(cmdline->Get("text"), config.cmdline);
}

TEST_F(VmBootTest, TimerInterruptsArrive) {
  std::vector<std::string> msgs;
  VmStats stats = Boot(Config("ticks:5"), &msgs);
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  EXPECT_EQ(stats.stop.guest_exit_code, 0u);
  auto ticks = FirstReportOf(msgs, "ticks");
  ASSERT_TRUE(ticks.has_value());
  EXPECT_GE(ticks->GetU64("count"), 5u);
}

TEST_F(VmBootTest, Cpl3LoopRunsToCompletion) {
  std::vector<std::string> msgs;
  VmStats stats = Boot(Config("spin:200000000"), &msgs);
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  auto result = FirstReportOf(msgs, "result");
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->Get("workload"), "spin");
  EXPECT_EQ(result->GetU64("iterations"), 200000000u);
  EXPECT_GT(result->GetU64("cycles"), 0u);
}

TEST_F(VmBootTest, TouchedMemoryBecomesResidentOnTheHost) {
  std::vector<std::string> msgs;
  VmStats stats = Boot(Config("touch:32", 128), &msgs);
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  auto result = FirstReportOf(msgs, "result");
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->GetU64("pages"), 32u * 256);
  // Every touched guest page is backed by the memfd now.
  EXPECT_GE(stats.guest_resident_bytes, 32 * kMiB);
  EXPECT_LT(stats.guest_resident_bytes, 128 * kMiB);
}

TEST_F(VmBootTest, TwoVcpusSeeTheMpTable) {
  std::vector<std::string> msgs;
  VmStats stats = Boot(Config("boot", 64, 2), &msgs);
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  auto cpus = FirstReportOf(msgs, "cpus");
  ASSERT_TRUE(cpus.has_value());
  EXPECT_EQ(cpus->GetU64("count"), 2u);
}

TEST_F(VmBootTest, TripleFaultStopsTheVmAndNotTheHost) {
  std::vector<std::string> msgs;
  VmStats stats = Boot(Config("triple-fault"), &msgs);
  EXPECT_EQ(stats.stop.reason, StopReason::kTripleFault) << stats.stop.detail;
  // The process is healthy: another VM boots fine right after.
  VmStats again = Boot(Config("boot"), &msgs);
  EXPECT_EQ(again.stop.reason, StopReason::kGuestShutdown) << again.stop.detail;
}

TEST_F(VmBootTest, I8042ResetStopsTheVm) {
  std::vector<std::string> msgs;
  VmStats stats = Boot(Config("reset"), &msgs);
  EXPECT_EQ(stats.stop.reason, StopReason::kReset) << stats.stop.detail;
}

TEST_F(VmBootTest, GuestExceptionIsReportedWithNonZeroExitCode) {
  std::vector<std::string> msgs;
  VmStats stats = Boot(Config("fault"), &msgs);
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  EXPECT_NE(stats.stop.guest_exit_code, 0u);
  auto fault = FirstReportOf(msgs, "fault");
  ASSERT_TRUE(fault.has_value());
  EXPECT_EQ(fault->Get("cpl"), "3");
}

TEST_F(VmBootTest, ConsoleFloodIsCappedAndCounted) {
  dsec::testing::TempDir dir;
  VmConfig config = Config("flood:32768");
  config.console.kind = ConsoleConfig::Kind::kFile;
  config.console.path = dir.path() + "/console.log";
  config.console.cap_bytes = 4096;
  std::vector<std::string> msgs;
  VmStats stats = Boot(config, &msgs);
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  EXPECT_GE(stats.console_bytes_in, 32768u);
  EXPECT_LE(stats.console_bytes_written, 4096u);
  EXPECT_GE(stats.console_bytes_dropped, 32768u - 4096u);
  struct stat st;
  ASSERT_EQ(::stat(config.console.path.c_str(), &st), 0);
  // The cap plus the one marker line saying output was capped.
  EXPECT_LE(st.st_size, 4096 + 200);
  std::ifstream in(config.console.path);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(content.find("capped"), std::string::npos);
}

TEST_F(VmBootTest, UnknownWorkloadFailsWithNonZeroExitCode) {
  std::vector<std::string> msgs;
  VmStats stats = Boot(Config("no-such-workload"), &msgs);
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  EXPECT_NE(stats.stop.guest_exit_code, 0u);
}

}  // namespace
}  // namespace dsec::vm
