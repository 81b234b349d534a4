// SPDX-License-Identifier: Apache-2.0
// The full Linux boot test, for hosts with hardware virtualisation: the
// microvm tier's real launcher boots the guest kernel (tools/build-guest-
// kernel.sh) with a root image built here from the dsec-agent binary
// (tools/build-guest-image.sh) and a Debian layer with python3, then runs
// commands through the agent, round-trips a file, packs the upper layer and
// destroys the VM.
//
// It first runs the CPL0 probe through the real monitor and skips, with
// the measured figure, where guest CPL0 code is emulated (PVM: HOST.md),
// since a Linux guest does not boot in useful time there.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sandbox/container/state_dir.h"
#include "sandbox/layers/layer_store.h"
#include "sandbox/layers/pack_diff.h"
#include "sandbox/microvm/cpl0_probe.h"
#include "sandbox/microvm/microvm_sandbox.h"
#include "sandbox/microvm/vm_launcher.h"
#include "tests/integration/test_support.h"

namespace dsec::microvm {
namespace {

constexpr int64_t kBootTimeoutMs = 60'000;

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// The checkout this test was built from (CMake passes absolute paths).
std::string SourceDir() {
  std::string f = __FILE__;
  size_t at = f.rfind("/tests/integration/");
  return at == std::string::npos ? "." : f.substr(0, at);
}

std::string Output(const std::vector<std::pair<int, std::string>>& chunks, int stream) {
  std::string out;
  for (const auto& [s, d] : chunks) {
    if (s == stream) out += d;
  }
  return out;
}

TEST(LinuxBootTest, BootsTheGuestKernelAndServesTheAgent) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root (namespaces, cgroups, mounts)";
  }
  if (std::string why = dsec::testing::KvmUnavailableReason(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  const std::string vmm = dsec::testing::MonitorBinaryPath();
  auto probe = RunCpl0Probe(vmm, dsec::testing::TestGuestPath());
  ASSERT_TRUE(probe.ok()) << probe.status();
  std::printf("CPL0 probe: %llu rounds, %.1f cycles per CPL0 round (CPL3: %.2f), probe VM %.0f ms\n",
              static_cast<unsigned long long>(probe->iterations), probe->cycles_per_round(),
              static_cast<double>(probe->cpl3_cycles) / static_cast<double>(probe->iterations), probe->wall_ms);
  if (probe->emulated()) {
    GTEST_SKIP() << EmulatedCpl0Reason(*probe);
  }

  const std::string kernel = DefaultGuestKernelPath();
  if (!Exists(kernel)) {
    GTEST_SKIP() << "guest kernel " << kernel << " not built: run tools/build-guest-kernel.sh";
  }
  const std::string agent = AgentBinaryBeside(vmm);
  if (!Exists(agent)) {
    GTEST_SKIP() << "dsec-agent " << agent << " not built (build the dsec-agent target)";
  }

  // Layers: the default Debian base with the python toolkit on top.
  auto store = layers::LayerStore::Create(layers::kDefaultStoreRoot);
  ASSERT_TRUE(store.ok()) << store.status();
  auto chain = store->Chain("python:1");
  if (!chain.ok()) {
    GTEST_SKIP() << "no layer with python3 in " << layers::kDefaultStoreRoot << " (" << chain.status()
                 << "): build it with tools/build-base-layer.sh --toolkit python 1 python3";
  }
  std::vector<std::string> images;
  for (const layers::LayerInfo& l : *chain) images.push_back(l.image_path);
  if (absl::Status dax = CheckDaxLayers(images); !dax.ok()) {
    GTEST_SKIP() << dax;
  }

  dsec::testing::TempDir tmp;
  const std::string rootfs = tmp.path() + "/rootfs.erofs";
  dsec::testing::CommandResult built =
      dsec::testing::RunCommand({SourceDir() + "/tools/build-guest-image.sh", agent, rootfs});
  ASSERT_EQ(built.exit_status, 0) << built.out << built.err;

  VmLauncherOptions lo;
  lo.monitor_binary = vmm;
  lo.kernel = kernel;
  lo.rootfs = rootfs;
  lo.testguest = dsec::testing::TestGuestPath();
  VmLauncher launcher(lo);
  ASSERT_TRUE(launcher.CheckHost().ok()) << launcher.CheckHost();
  MicrovmSandboxOptions so;
  so.state_root = tmp.path() + "/state";
  so.boot_timeout_ms = kBootTimeoutMs;
  MicrovmSpec spec;
  spec.id = absl::StrCat("linux-boot-", ::getpid());
  spec.layers = images;
  spec.memory_mib = 512;
  auto sb = MicrovmSandbox::Create(launcher, spec, so);
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_LT((*sb)->boot_ms(), kBootTimeoutMs) << "the agent answered after the boot deadline";
  std::printf("boot to agent HELLO: %.1f ms\n", (*sb)->boot_ms());

  std::vector<std::pair<int, std::string>> chunks;
  auto collect = [&chunks](int stream, std::string_view d) { chunks.emplace_back(stream, std::string(d)); };
  agent::ExecRequest req;
  req.argv = {"uname", "-a"};
  req.timeout_ms = 30'000;
  auto done = (*sb)->Exec(req, collect);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code, 0);
  EXPECT_EQ(Output(chunks, 1).rfind("Linux ", 0), 0u) << Output(chunks, 1);

  chunks.clear();
  req.argv = {"python3", "-c", "print(6*7)"};
  done = (*sb)->Exec(req, collect);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code, 0) << Output(chunks, 2);
  EXPECT_EQ(Output(chunks, 1), "42\n");

  ASSERT_TRUE((*sb)->WriteFile("/root/round-trip.txt", "through vsock\n", 0644).ok());
  auto back = (*sb)->ReadFile("/root/round-trip.txt", 1 << 20);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, "through vsock\n");
  chunks.clear();
  req.argv = {"cat", "/root/round-trip.txt"};
  done = (*sb)->Exec(req, collect);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(Output(chunks, 1), "through vsock\n");

  auto upper = (*sb)->PackDiffDir();
  ASSERT_TRUE(upper.ok()) << upper.status();
  EXPECT_TRUE(Exists(*upper + "/root/round-trip.txt"));
  auto diff_store = layers::LayerStore::Create(tmp.path() + "/store");
  ASSERT_TRUE(diff_store.ok());
  layers::BuildRequest breq;
  breq.name = "linux-boot-diff";
  breq.version = "1";
  auto layer = layers::PackDiff(*diff_store, *upper, breq);
  ASSERT_TRUE(layer.ok()) << layer.status();

  const std::string state = (*sb)->state_dir();
  ASSERT_TRUE((*sb)->Destroy().ok());
  EXPECT_FALSE(Exists(state));
}

}  // namespace
}  // namespace dsec::microvm
