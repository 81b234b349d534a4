// SPDX-License-Identifier: Apache-2.0
// The real launcher: one jailed dsec-vmm per sandbox booting the guest
// Linux kernel with the root image (dsec-agent as PID 1) on /dev/pmem0 and
// the sandbox's layers on /dev/pmem1..., the agent reached through the
// monitor's vsock socket. Before the first launch it checks the host: the
// CPL0 probe (cpl0_probe.h; cached), the kernel and the root image.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "sandbox/microvm/cpl0_probe.h"
#include "sandbox/microvm/launcher.h"

namespace dsec::microvm {

// ${DSEC_CACHE_DIR:-$HOME/.cache/dsec-vmm}
std::string DefaultCacheDir();
// <cache>/guest-kernel/current/vmlinux (tools/build-guest-kernel.sh)
std::string DefaultGuestKernelPath();
// <cache>/guest-image/rootfs.erofs (tools/build-guest-image.sh)
std::string DefaultGuestRootfsPath();
// dsec-monitor beside this executable (/proc/self/exe) or where the build
// put it, else "dsec-monitor".
std::string DefaultMonitorBinary();
// The dsec-agent of the build tree the monitor sits in
// (<dir of vmm>/guest-kernel/agent/dsec-agent), for the build hint.
std::string AgentBinaryBeside(const std::string& monitor_binary);

struct VmLauncherOptions {
  std::string monitor_binary;  // "" = DefaultMonitorBinary()
  std::string kernel;      // "" = DefaultGuestKernelPath()
  std::string rootfs;      // "" = DefaultGuestRootfsPath()
  std::string testguest;   // the probe's kernel ("" = vm run's default: the test guest beside it)
  uint32_t vcpus = 1;      // at least; a sandbox with cpus > 1 gets ceil(cpus)
  uint64_t upper_mib = 256;
  uint64_t overhead_mib = 96;
  uint64_t console_cap_bytes = 1u << 20;
  std::string extra_cmdline;
  bool pivot_root = true;
  // Skip the CPL0 probe (benchmarks that ran it already).
  bool skip_probe = false;
};

class VmLauncher : public Launcher {
 public:
  explicit VmLauncher(VmLauncherOptions options);
  absl::Status CheckHost() override;
  absl::StatusOr<std::unique_ptr<AgentHost>> Launch(const LaunchSpec& spec) override;

  const VmLauncherOptions& options() const { return options_; }
  // The probe's figures once it has run.
  std::optional<Cpl0Probe> probe() const;

 private:
  VmLauncherOptions options_;
  mutable std::mutex mu_;
  std::optional<Cpl0Probe> probe_;  // guarded by mu_; kept once it ran
};

}  // namespace dsec::microvm
