// SPDX-License-Identifier: Apache-2.0
// The real launcher end to end as far as this host allows: the built guest
// kernel, a root image made here from dsec-agent, a jailed dsec-vmm with
// pmem, vsock, balloon and control socket. With hardware virtualisation the
// agent answers and runs a command; where guest CPL0 code is emulated the
// guest cannot boot in time, and the create must end at its deadline with
// the console in the error and nothing left behind. The host check itself
// (probe, missing kernel or root image) is tested here too.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sandbox/container/state_dir.h"
#include "sandbox/microvm/cpl0_probe.h"
#include "sandbox/microvm/microvm_sandbox.h"
#include "sandbox/microvm/vm_launcher.h"

namespace dsec::microvm {
namespace {

std::string SourceDir() { return DSEC_SOURCE_DIR; }

class VmLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) {
      GTEST_SKIP() << "needs root (namespaces, cgroups, mounts)";
    }
    if (::access("/dev/kvm", R_OK | W_OK) != 0) {
      GTEST_SKIP() << "this host has no usable /dev/kvm";
    }
    char tmpl[] = "/tmp/dsec-mvm-launcher-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) {
      EXPECT_TRUE(container::RemoveTree(dir_).ok());
    }
  }
  std::string dir_;
};

TEST_F(VmLauncherTest, HostCheckNamesWhatIsMissing) {
  VmLauncherOptions o;
  o.monitor_binary = DSEC_MONITOR_BINARY_PATH;
  o.testguest = DSEC_TESTGUEST_ELF_PATH;
  o.kernel = dir_ + "/no-vmlinux";
  o.rootfs = dir_ + "/no-rootfs.erofs";
  VmLauncher launcher(o);
  absl::Status s = launcher.CheckHost();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  ASSERT_TRUE(launcher.probe().has_value()) << "the probe runs first";
  if (launcher.probe()->emulated()) {
    EXPECT_EQ(std::string(s.message()), EmulatedCpl0Reason(*launcher.probe()));
    o.skip_probe = true;  // to see the file checks on this host too
  }
  VmLauncher files_only(o);
  s = files_only.CheckHost();
  EXPECT_NE(s.message().find("guest kernel " + dir_ + "/no-vmlinux not found: build it with "
                             "tools/build-guest-kernel.sh"),
            std::string::npos)
      << s;
  const std::string kernel = dir_ + "/vmlinux";
  ASSERT_EQ(::symlink(DSEC_TESTGUEST_ELF_PATH, kernel.c_str()), 0);
  o.kernel = kernel;
  VmLauncher no_rootfs(o);
  s = no_rootfs.CheckHost();
  EXPECT_NE(s.message().find("guest root image " + dir_ + "/no-rootfs.erofs not found: build it with "
                             "tools/build-guest-image.sh "),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("/guest-kernel/agent/dsec-agent"), std::string::npos) << s;
}

TEST_F(VmLauncherTest, BootsTheGuestKernelOrEndsAtTheBootDeadline) {
  const std::string kernel = DefaultGuestKernelPath();
  if (::access(kernel.c_str(), R_OK) != 0) {
    GTEST_SKIP() << "guest kernel " << kernel << " not built: run tools/build-guest-kernel.sh";
  }
  const std::string agent = AgentBinaryBeside(DSEC_MONITOR_BINARY_PATH);
  if (::access(agent.c_str(), X_OK) != 0) {
    GTEST_SKIP() << "dsec-agent " << agent << " not built";
  }
  const std::string rootfs = dir_ + "/rootfs.erofs";
  const std::string cmd = absl::StrCat(SourceDir(), "/tools/build-guest-image.sh ", agent, " ", rootfs,
                                       " > /dev/null");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  auto probe = RunCpl0Probe(DSEC_MONITOR_BINARY_PATH, DSEC_TESTGUEST_ELF_PATH);
  ASSERT_TRUE(probe.ok()) << probe.status();
  VmLauncherOptions o;
  o.monitor_binary = DSEC_MONITOR_BINARY_PATH;
  o.kernel = kernel;
  o.rootfs = rootfs;
  o.skip_probe = true;  // launch even where the probe would refuse
  VmLauncher launcher(o);
  MicrovmSandboxOptions so;
  so.state_root = dir_ + "/state";
  so.boot_timeout_ms = probe->emulated() ? 3'000 : 60'000;
  MicrovmSpec spec;
  spec.id = "linux";
  spec.memory_mib = 256;
  const auto t0 = std::chrono::steady_clock::now();
  auto sb = MicrovmSandbox::Create(launcher, spec, so);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (probe->emulated()) {
    ASSERT_FALSE(sb.ok());
    // Either the boot deadline passes with the monitor still running (it
    // took every device of the plan), or, when the emulated kernel gets far
    // enough first, PVM's emulator gives up on an instruction (cmpxchg16b
    // in early boot: KVM_EXIT_INTERNAL_ERROR) and the monitor stops with
    // status 5. Both end the create with the reason, in bounded time.
    const std::string msg(sb.status().message());
    if (absl::IsDeadlineExceeded(sb.status())) {
      EXPECT_NE(msg.find("did not answer within 3000 ms"), std::string::npos) << msg;
      EXPECT_NE(msg.find("the monitor is still running"), std::string::npos)
          << "the monitor took every device of the plan: " << msg;
    } else {
      EXPECT_TRUE(absl::IsUnavailable(sb.status())) << sb.status();
      EXPECT_NE(msg.find("stop_reason=internal-error"), std::string::npos) << msg;
      EXPECT_NE(msg.find("KVM_EXIT_INTERNAL_ERROR"), std::string::npos) << msg;
    }
    EXPECT_LT(ms, 20'000);
    std::printf("emulated CPL0 (%.0f cycles/round): %s\n", probe->cycles_per_round(),
                std::string(sb.status().message()).substr(0, 600).c_str());
  } else {
    ASSERT_TRUE(sb.ok()) << sb.status();
    agent::ExecRequest req;
    req.argv = {"/dsec-agent", "--help"};
    std::string out;
    auto done = (*sb)->Exec(req, [&out](int, std::string_view d) { out.append(d.data(), d.size()); });
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(done->exit_code, 0);
    EXPECT_NE(out.find("usage: dsec-agent"), std::string::npos) << out;
    ASSERT_TRUE((*sb)->Destroy().ok());
  }
  struct stat st;
  EXPECT_NE(::stat((so.state_root + "/linux").c_str(), &st), 0) << "state left behind";
}

}  // namespace
}  // namespace dsec::microvm
