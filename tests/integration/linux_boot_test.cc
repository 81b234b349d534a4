// SPDX-License-Identifier: Apache-2.0
// The full Linux boot test, for hosts with hardware virtualisation: the
// microvm tier's real launcher boots the guest kernel (tools/build-guest-
// kernel.sh) with a root image built here from the dsec-agent binary
// (tools/build-guest-image.sh) and a Debian layer with python3, then runs
// commands through the agent, round-trips a file, packs the upper layer and
// destroys the VM; for the ELF vmlinux and the bzImage, with 1 and 2 vCPUs.
//
// It first runs the CPL0 probe through the real monitor and skips, with
// the measured figure, where guest CPL0 code is emulated (PVM: HOST.md),
// since a Linux guest does not boot in useful time there.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <memory>
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

// The checkout this test was built from (not __FILE__: a compiler cache
// may compile with paths relative to the build directory).
std::string SourceDir() { return DSEC_SOURCE_DIR; }

std::string Output(const std::vector<std::pair<int, std::string>>& chunks, int stream) {
  std::string out;
  for (const auto& [s, d] : chunks) {
    if (s == stream) out += d;
  }
  return out;
}

// What every case shares, made once: the probe, the layers, the root image.
struct Shared {
  std::string skip;   // non-empty: skip every case with this
  std::string error;  // non-empty: fail every case with this
  std::string vmm, kernel_dir, agent;
  std::vector<std::string> images;
  std::unique_ptr<dsec::testing::TempDir> tmp;
  std::string rootfs;
};

const Shared& SharedSetUp() {
  // A static, so that the root image is removed at exit.
  static Shared shared = [] {
    Shared sh;
    if (::geteuid() != 0) {
      sh.skip = "needs root (namespaces, cgroups, mounts)";
      return sh;
    }
    if (std::string why = dsec::testing::KvmUnavailableReason(); !why.empty()) {
      sh.skip = why;
      return sh;
    }
    sh.vmm = dsec::testing::MonitorBinaryPath();
    auto probe = RunCpl0Probe(sh.vmm, dsec::testing::TestGuestPath());
    if (!probe.ok()) {
      sh.error = probe.status().ToString();
      return sh;
    }
    std::printf("CPL0 probe: %llu rounds, %.1f cycles per CPL0 round (CPL3: %.2f), probe VM %.0f ms\n",
                static_cast<unsigned long long>(probe->iterations), probe->cycles_per_round(),
                static_cast<double>(probe->cpl3_cycles) / static_cast<double>(probe->iterations),
                probe->wall_ms);
    if (probe->emulated()) {
      sh.skip = EmulatedCpl0Reason(*probe);
      return sh;
    }
    const std::string kernel = DefaultGuestKernelPath();
    if (!Exists(kernel)) {
      sh.skip = "guest kernel " + kernel + " not built: run tools/build-guest-kernel.sh";
      return sh;
    }
    sh.kernel_dir = kernel.substr(0, kernel.rfind('/'));
    sh.agent = AgentBinaryBeside(sh.vmm);
    if (!Exists(sh.agent)) {
      sh.skip = "dsec-agent " + sh.agent + " not built (build the dsec-agent target)";
      return sh;
    }
    // Layers: the default Debian base with the python toolkit on top.
    auto store = layers::LayerStore::Create(layers::kDefaultStoreRoot);
    if (!store.ok()) {
      sh.error = store.status().ToString();
      return sh;
    }
    auto chain = store->Chain("python:1");
    if (!chain.ok()) {
      sh.skip = absl::StrCat("no layer with python3 in ", layers::kDefaultStoreRoot, " (",
                              chain.status().ToString(),
                              "): build it with tools/build-base-layer.sh --toolkit python 1 python3");
      return sh;
    }
    for (const layers::LayerInfo& l : *chain) sh.images.push_back(l.image_path);
    if (absl::Status dax = CheckDaxLayers(sh.images); !dax.ok()) {
      sh.skip = dax.ToString();
      return sh;
    }
    sh.tmp = std::make_unique<dsec::testing::TempDir>();
    sh.rootfs = sh.tmp->path() + "/rootfs.erofs";
    dsec::testing::CommandResult built =
        dsec::testing::RunCommand({SourceDir() + "/tools/build-guest-image.sh", sh.agent, sh.rootfs});
    if (built.exit_status != 0) sh.error = "build-guest-image.sh: " + built.out + built.err;
    return sh;
  }();
  return shared;
}

struct BootCase {
  const char* kernel;  // file in the guest kernel's directory
  uint32_t vcpus;
};

class LinuxBootTest : public ::testing::TestWithParam<BootCase> {};

TEST_P(LinuxBootTest, BootsTheGuestKernelAndServesTheAgent) {
  const Shared& sh = SharedSetUp();
  if (!sh.skip.empty()) GTEST_SKIP() << sh.skip;
  ASSERT_TRUE(sh.error.empty()) << sh.error;
  const BootCase c = GetParam();
  const std::string kernel = sh.kernel_dir + "/" + c.kernel;
  if (!Exists(kernel)) GTEST_SKIP() << kernel << " not built (tools/build-guest-kernel.sh)";

  dsec::testing::TempDir tmp;
  VmLauncherOptions lo;
  lo.monitor_binary = sh.vmm;
  lo.kernel = kernel;
  lo.rootfs = sh.rootfs;
  lo.testguest = dsec::testing::TestGuestPath();
  lo.vcpus = c.vcpus;
  VmLauncher launcher(lo);
  ASSERT_TRUE(launcher.CheckHost().ok()) << launcher.CheckHost();
  MicrovmSandboxOptions so;
  so.state_root = tmp.path() + "/state";
  so.boot_timeout_ms = kBootTimeoutMs;
  MicrovmSpec spec;
  spec.id = absl::StrCat("linux-boot-", ::getpid(), "-", c.vcpus, std::string(1, c.kernel[0]));
  spec.layers = sh.images;
  spec.memory_mib = 512;
  auto sb = MicrovmSandbox::Create(launcher, spec, so);
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_LT((*sb)->boot_ms(), kBootTimeoutMs) << "the agent answered after the boot deadline";
  std::printf("%s, %u vCPU: boot to agent HELLO %.1f ms\n", c.kernel, c.vcpus, (*sb)->boot_ms());

  std::vector<std::pair<int, std::string>> chunks;
  auto collect = [&chunks](int stream, std::string_view d) { chunks.emplace_back(stream, std::string(d)); };
  agent::ExecRequest req;
  req.argv = {"uname", "-a"};
  req.timeout_ms = 30'000;
  auto done = (*sb)->Exec(req, collect);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code, 0);
  EXPECT_EQ(Output(chunks, 1).rfind("Linux ", 0), 0u) << Output(chunks, 1);

  // The guest sees the vCPUs it was given.
  chunks.clear();
  req.argv = {"nproc"};
  done = (*sb)->Exec(req, collect);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(Output(chunks, 1), absl::StrCat(c.vcpus, "\n"));

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

INSTANTIATE_TEST_SUITE_P(KernelsAndVcpus, LinuxBootTest,
                         ::testing::Values(BootCase{"vmlinux", 1}, BootCase{"vmlinux", 2},
                                           BootCase{"bzImage", 1}, BootCase{"bzImage", 2}),
                         [](const ::testing::TestParamInfo<BootCase>& i) {
                           return absl::StrCat(i.param.kernel, "_", i.param.vcpus, "vcpu");
                         });

}  // namespace
}  // namespace dsec::microvm
