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
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sandbox/microvm/cpl0_probe.h"
#include "sandbox/microvm/launcher.h"

namespace dsec::microvm {

// The guest's network on the kernel command line, for its PID 1
// (guest-kernel/agent: "dsec.net=<address>/<prefix>,<gateway>").
std::string NetCmdlineParameter(const LaunchNetwork& net);

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

// The uids (each also the gid) the node's monitors drop to, one per live
// monitor: a monitor a guest took over can reach no other monitor's
// process or files. A fixed range far above real accounts; handed out
// round-robin, so that a released id is reused as late as possible.
// Threads: any.
class UidPool {
 public:
  static constexpr uint32_t kDefaultBase = 1'900'000'000;
  static constexpr uint32_t kDefaultSize = 65'536;
  UidPool(uint32_t base = kDefaultBase, uint32_t size = kDefaultSize);

  // Owns one id until destroyed.
  class Lease {
   public:
    Lease(UidPool* pool, uint32_t uid) : pool_(pool), uid_(uid) {}
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    uint32_t uid() const { return uid_; }

   private:
    UidPool* pool_;
    uint32_t uid_;
  };
  // ResourceExhausted when every id is leased.
  absl::StatusOr<std::unique_ptr<Lease>> Acquire();
  size_t leased() const;

 private:
  void Release(uint32_t uid);
  const uint32_t base_;
  const uint32_t size_;
  mutable std::mutex mu_;
  uint32_t next_ = 0;               // guarded by mu_
  std::vector<bool> used_;          // guarded by mu_
  size_t leased_ = 0;               // guarded by mu_
};

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
  // Each monitor drops to a uid of its own from the pool (none with qos,
  // whose placement needs root). false: monitors stay uid 0 without
  // capabilities.
  bool own_uid = true;
  // Bounds a machine save (AgentHost::SaveMachine): the guest's memory is
  // written at the disk's rate meanwhile.
  int64_t snapshot_timeout_ms = 120'000;
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
  UidPool uids_;
  mutable std::mutex mu_;
  std::optional<Cpl0Probe> probe_;  // guarded by mu_; kept once it ran
};

}  // namespace dsec::microvm
