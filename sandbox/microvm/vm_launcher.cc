// SPDX-License-Identifier: Apache-2.0
#include "sandbox/microvm/vm_launcher.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "guest-kernel/agent/client.h"
#include "sandbox/microvm/vm_process.h"
#include "vmm/monitor/default_paths.h"
#include "base/status.h"

namespace dsec::microvm {

namespace {

bool Readable(const std::string& path) { return !path.empty() && ::access(path.c_str(), R_OK) == 0; }

class VmAgentHost : public AgentHost {
 public:
  VmAgentHost(std::unique_ptr<VmProcess> vm, uint32_t port, std::unique_ptr<UidPool::Lease> uid,
              int64_t snapshot_timeout_ms)
      : uid_(std::move(uid)), vm_(std::move(vm)), port_(port), snapshot_timeout_ms_(snapshot_timeout_ms) {}
  pid_t pid() const override { return vm_->pid(); }
  int exit_fd() const override { return vm_->exit_fd(); }
  absl::StatusOr<ScopedFd> ConnectAgent(int64_t timeout_ms) override {
    return agent::ConnectVsockUnix(vm_->files().vsock_socket, port_, timeout_ms);
  }
  std::string ExitReport() override { return vm_->ExitReport(); }
  absl::Status Pause() override { return vm_->Pause(); }
  absl::Status Resume() override { return vm_->Resume(); }
  absl::StatusOr<MachineSaveInfo> SaveMachine(const std::string& dest_dir) override {
    DSEC_ASSIGN_OR_RETURN(MachineSave s, vm_->SaveMachine(dest_dir, snapshot_timeout_ms_));
    return MachineSaveInfo{s.memory_bytes, s.memory_bytes_written, s.pause_ms};
  }
  absl::Status Stop(int64_t grace_ms) override {
    if (grace_ms > 0) WaitReadable(vm_->exit_fd(), grace_ms);
    return vm_->Stop(0);
  }
  VmProcess& vm() { return *vm_; }

 private:
  // Declared first, released last: the id is free only once the monitor is gone.
  std::unique_ptr<UidPool::Lease> uid_;
  std::unique_ptr<VmProcess> vm_;
  const uint32_t port_;
  const int64_t snapshot_timeout_ms_;
};

}  // namespace

absl::StatusOr<MachineSaveInfo> AgentHost::SaveMachine(const std::string& /*dest_dir*/) {
  return absl::UnimplementedError("this sandbox's agent runs as a host process: there is no machine to save");
}

UidPool::UidPool(uint32_t base, uint32_t size)
    : base_(base), size_(size), next_(size > 0 ? static_cast<uint32_t>(::getpid()) * 2654435761u % size : 0),
      used_(size, false) {
  // Two daemons on one node (tests do that) start far apart in the range.
}

UidPool::Lease::~Lease() { pool_->Release(uid_); }

absl::StatusOr<std::unique_ptr<UidPool::Lease>> UidPool::Acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t i = 0; i < size_; ++i) {
    const uint32_t slot = (next_ + i) % size_;
    if (!used_[slot]) {
      used_[slot] = true;
      ++leased_;
      next_ = (slot + 1) % size_;
      return std::make_unique<Lease>(this, base_ + slot);
    }
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("microvm: all ", size_, " monitor uids are in use"));
}

void UidPool::Release(uint32_t uid) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t slot = uid - base_;
  if (slot < size_ && used_[slot]) {
    used_[slot] = false;
    --leased_;
  }
}

size_t UidPool::leased() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leased_;
}

std::string NetCmdlineParameter(const LaunchNetwork& net) {
  return absl::StrCat("dsec.net=", net.address_cidr, ",", net.gateway);
}

std::string DefaultCacheDir() {
  if (const char* d = std::getenv("DSEC_CACHE_DIR"); d != nullptr && *d != '\0') return d;
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr && *home != '\0' ? home : "/root", "/.cache/dsec-vmm");
}

std::string DefaultGuestKernelPath() { return DefaultCacheDir() + "/guest-kernel/current/vmlinux"; }
std::string DefaultGuestRootfsPath() { return DefaultCacheDir() + "/guest-image/rootfs.erofs"; }

std::string DefaultMonitorBinary() {
  std::string found = monitor::MonitorBinaryPath();
  return found.empty() ? "dsec-monitor" : found;
}

std::string AgentBinaryBeside(const std::string& monitor_binary) {
  size_t slash = monitor_binary.rfind('/');
  std::string dir = slash == std::string::npos ? "." : monitor_binary.substr(0, slash);
  return dir + "/guest-kernel/agent/dsec-agent";
}

VmLauncher::VmLauncher(VmLauncherOptions options) : options_(std::move(options)) {
  if (options_.monitor_binary.empty()) options_.monitor_binary = DefaultMonitorBinary();
  if (options_.kernel.empty()) options_.kernel = DefaultGuestKernelPath();
  if (options_.rootfs.empty()) options_.rootfs = DefaultGuestRootfsPath();
}

std::optional<Cpl0Probe> VmLauncher::probe() const {
  std::lock_guard<std::mutex> lock(mu_);
  return probe_;
}

absl::Status VmLauncher::CheckHost() {
  if (!options_.skip_probe) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!probe_) {
      // A probe that could not run is not cached: the next create retries.
      DSEC_ASSIGN_OR_RETURN(Cpl0Probe p, RunCpl0Probe(options_.monitor_binary, options_.testguest));
      probe_ = p;
    }
    if (probe_->emulated()) return absl::UnavailableError(EmulatedCpl0Reason(*probe_));
  }
  if (!Readable(options_.kernel)) {
    return absl::UnavailableError(absl::StrCat("microvm tier: guest kernel ", options_.kernel,
                                               " not found: build it with tools/build-guest-kernel.sh"));
  }
  if (!Readable(options_.rootfs)) {
    return absl::UnavailableError(absl::StrCat(
        "microvm tier: guest root image ", options_.rootfs, " not found: build it with "
        "tools/build-guest-image.sh ", AgentBinaryBeside(options_.monitor_binary), " ", options_.rootfs));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<AgentHost>> VmLauncher::Launch(const LaunchSpec& spec) {
  VmPlan plan;
  plan.monitor_binary = options_.monitor_binary;
  plan.kernel = options_.kernel;
  std::string extra = options_.extra_cmdline;
  if (spec.network) {
    plan.tap_fd = spec.network->tap_fd;
    plan.mac = spec.network->mac;
    absl::StrAppend(&extra, extra.empty() ? "" : " ", NetCmdlineParameter(*spec.network));
  }
  plan.cmdline = LinuxCmdline(spec.layers.size(), options_.upper_mib, spec.agent_port, extra);
  plan.pmems.push_back(options_.rootfs);
  plan.pmems.insert(plan.pmems.end(), spec.layers.begin(), spec.layers.end());
  plan.mem_mib = spec.memory_mib;
  plan.vcpus = std::max<uint32_t>(options_.vcpus, static_cast<uint32_t>(std::ceil(spec.cpus)));
  // With the daemon's placement (join) the monitor places nothing itself.
  if (!spec.join) plan.qos = spec.qos;
  plan.console_cap_bytes = options_.console_cap_bytes;
  plan.snapshot_dir = spec.snapshot_dir;
  plan.restore_dir = spec.restore_dir;
  std::unique_ptr<UidPool::Lease> uid;
  if (options_.own_uid && plan.qos.empty()) {
    DSEC_ASSIGN_OR_RETURN(uid, uids_.Acquire());
    plan.uid = uid->uid();
  }
  VmJailOptions jail;
  jail.id = spec.id;
  jail.state_dir = spec.state_dir;
  jail.overhead_mib = options_.overhead_mib;
  jail.cpus = spec.cpus;
  jail.pivot_root = options_.pivot_root;
  jail.record_cgroup = spec.record_cgroup;
  jail.join = spec.join;
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<VmProcess> vm, VmProcess::Start(plan, jail));
  return std::unique_ptr<AgentHost>(
      new VmAgentHost(std::move(vm), spec.agent_port, std::move(uid), options_.snapshot_timeout_ms));
}

}  // namespace dsec::microvm
