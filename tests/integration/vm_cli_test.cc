// SPDX-License-Identifier: Apache-2.0
// The real dsec-vmm binary: `vm run` on defaults, exit statuses, and one
// clear line for bad arguments and unusable images.
#include <algorithm>
#include <fstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_support.h"

namespace dsec {
namespace {

using dsec::testing::RunCommand;

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

class VmCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = dsec::testing::KvmUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << why;
  }
  std::string bin_ = dsec::testing::VmmBinaryPath();
};

TEST_F(VmCliTest, RunsTheTestGuestOnDefaults) {
  auto r = RunCommand({bin_, "vm", "run"});
  EXPECT_EQ(r.exit_status, 0) << r.err;
  EXPECT_NE(r.out.find("testguest: boot protocol=linux64"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("testguest: cmdline text=console=ttyS0"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("reason=guest-shutdown exit_code=0"), std::string::npos) << r.err;
}

TEST_F(VmCliTest, MissingKernelIsOneClearLine) {
  auto r = RunCommand({bin_, "vm", "run", "--kernel", "/nonexistent/vmlinux"});
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/vmlinux"), std::string::npos) << r.err;
}

TEST_F(VmCliTest, TruncatedKernelIsOneClearLine) {
  dsec::testing::TempDir dir;
  std::ifstream in(dsec::testing::TestGuestPath(), std::ios::binary);
  std::string head(200, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  std::string path = dir.path() + "/truncated.elf";
  std::ofstream(path, std::ios::binary) << head;
  auto r = RunCommand({bin_, "vm", "run", "--kernel", path});
  EXPECT_EQ(r.exit_status, 2) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
}

TEST_F(VmCliTest, GarbageKernelIsOneClearLine) {
  dsec::testing::TempDir dir;
  std::string path = dir.path() + "/garbage";
  std::ofstream(path, std::ios::binary) << std::string(8192, 'x');
  auto r = RunCommand({bin_, "vm", "run", "--kernel", path});
  EXPECT_EQ(r.exit_status, 2) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
}

TEST_F(VmCliTest, BadArgumentsAreRejected) {
  EXPECT_EQ(RunCommand({bin_, "vm", "run", "--vcpus", "0"}).exit_status, 2);
  EXPECT_EQ(RunCommand({bin_, "vm", "run", "--mem-mib", "abc"}).exit_status, 2);
  EXPECT_EQ(RunCommand({bin_, "vm", "run", "--boot", "bios"}).exit_status, 2);
  EXPECT_EQ(RunCommand({bin_, "vm", "nosuch"}).exit_status, 2);
}

TEST_F(VmCliTest, ExitStatusSaysHowTheGuestStopped) {
  EXPECT_EQ(RunCommand({bin_, "vm", "run", "--cmdline", "testguest.run=triple-fault"}).exit_status,
            4);
  EXPECT_EQ(RunCommand({bin_, "vm", "run", "--cmdline", "testguest.run=reset"}).exit_status, 3);
  EXPECT_EQ(RunCommand({bin_, "vm", "run", "--cmdline", "testguest.run=fault"}).exit_status, 1);
  EXPECT_EQ(RunCommand({bin_, "vm", "run", "--cmdline", "testguest.run=spin:1000000000000",
                        "--timeout-ms", "300"})
                .exit_status,
            6);
}

// The guest finds the ACPI tables and powers off through PM1a_CNT, as
// Linux's poweroff does: the monitor exits at once with status 0. Without
// ACPI the guest finds no RSDP and says so.
TEST_F(VmCliTest, AcpiPowerOffStopsTheMonitorWithStatusZero) {
  auto r = RunCommand({bin_, "vm", "run", "--cmdline", "testguest.run=acpi-poweroff",
                       "--timeout-ms", "20000"});
  EXPECT_EQ(r.exit_status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("acpi rsdp=0xe0000 pm1a_cnt=0x604 slp_typ=5"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("guest powered off (ACPI S5)"), std::string::npos) << r.err;

  auto off = RunCommand({bin_, "vm", "run", "--no-acpi", "--cmdline",
                         "testguest.run=acpi-poweroff", "--timeout-ms", "20000"});
  EXPECT_EQ(off.exit_status, 1) << off.out << off.err;
  EXPECT_NE(off.out.find("error acpi-no-rsdp"), std::string::npos) << off.out;
}

TEST_F(VmCliTest, FloodingGuestIsCappedOnStdoutAndStatsSayHowMuchWasDropped) {
  dsec::testing::TempDir dir;
  std::string stats = dir.path() + "/stats.json";
  auto r = RunCommand({bin_, "vm", "run", "--cmdline", "testguest.run=flood:20000",
                       "--console-cap-bytes", "2048", "--quiet-report", "--stats-json", stats});
  EXPECT_EQ(r.exit_status, 0) << r.err;
  EXPECT_LE(r.out.size(), 2048u + 200u);
  std::ifstream in(stats);
  auto j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_GE(j["console"]["bytes_dropped"].get<uint64_t>(), 20000u - 2048u);
  EXPECT_NE(r.err.find("bytes from the guest dropped"), std::string::npos) << r.err;
}

// `sandbox run --tier microvm`: bad input is refused before any VM (the
// runs themselves are tests/nested/microvm_cli.py, in L1).
TEST(SandboxRunMicrovmCliTest, BadInputIsOneClearLineBeforeAnyVm) {
  const std::string bin = dsec::testing::VmmBinaryPath();
  auto r = RunCommand({bin, "sandbox", "run", "--tier", "microvm", "--env", "NOEQUALS", "--", "true"});
  EXPECT_EQ(r.exit_status, 2) << r.err;
  EXPECT_NE(r.err.find("--env NOEQUALS: expected KEY=VALUE"), std::string::npos) << r.err;
  r = RunCommand({bin, "sandbox", "run", "--tier", "microvm", "--layers", "/nonexistent/x.erofs",
                  "--", "true"});
  EXPECT_EQ(r.exit_status, 2) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/x.erofs"), std::string::npos) << r.err;
  r = RunCommand({bin, "sandbox", "run", "--tier", "gpu", "--", "true"});
  EXPECT_EQ(r.exit_status, 2) << r.err;
}

}  // namespace
}  // namespace dsec
