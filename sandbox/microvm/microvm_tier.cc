// SPDX-License-Identifier: Apache-2.0
#include "sandbox/microvm/microvm_tier.h"

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status.h"
#include "sandbox/network/netlink.h"
#include "sandbox/network/sandbox_network.h"
#include "sched/isolation.h"

namespace dsec::microvm {


namespace {

const char* EntryTypeString(agent::EntryType t) {
  switch (t) {
    case agent::EntryType::kFile:
      return "file";
    case agent::EntryType::kDir:
      return "dir";
    case agent::EntryType::kSymlink:
      return "symlink";
    case agent::EntryType::kOther:
      return "other";
  }
  return "other";
}

class MicrovmTierSandbox : public tier::TierSandbox {
 public:
  MicrovmTierSandbox(std::unique_ptr<MicrovmSandbox> sb, std::shared_ptr<network::SandboxNetwork> net)
      : network_(std::move(net)), sb_(std::move(sb)) {}
  ~MicrovmTierSandbox() override { (void)Destroy(); }

  absl::StatusOr<tier::ExecOutcome> Exec(const tier::ExecSpec& spec) override {
    agent::ExecRequest req;
    req.argv = spec.argv;
    req.env = spec.env;
    req.cwd = spec.cwd;
    req.timeout_ms = spec.timeout_ms > 0 ? static_cast<uint64_t>(spec.timeout_ms) : 0;
    req.output_cap_bytes = spec.output_cap_bytes;
    req.stdin = !spec.stdin_data.empty() || (spec.control != nullptr && spec.control->stdin_open());
    tier::ExecOutcome out;
    // The agent applies the cap; what arrives is what the cap admitted.
    auto on_chunk = [&out, &spec](int stream, std::string_view data) {
      (stream == 2 ? out.stderr_data : out.stdout_data).append(data.data(), data.size());
      if (spec.on_output) spec.on_output(stream, data);
    };
    auto done = sb_->Exec(req, on_chunk, spec.stdin_data, spec.control.get(), spec.on_spawned);
    if (!done.ok()) {
      // Not started in the guest: 127 or 126, as a shell reports it.
      if (std::optional<tier::ExecOutcome> shell = tier::ShellOutcomeOf(done.status())) return *shell;
      return done.status();
    }
    out.exit_code = done->exit_code;
    out.signal = done->signal;
    out.timed_out = done->timed_out;
    out.killed_by = done->killed_by == "disconnect" ? "" : done->killed_by;
    out.stdout_dropped = done->stdout_dropped;
    out.stderr_dropped = done->stderr_dropped;
    out.duration_ms = static_cast<double>(done->duration_ms);
    return out;
  }

  absl::Status Pause() override { return sb_->Pause(); }
  absl::Status Resume() override { return sb_->Resume(); }
  // Cuts every running exec's connection: the agent kills each command's
  // tree (tier.h KillExecs).
  bool KillExecs() override { return sb_->KillExecs(); }

  absl::StatusOr<std::string> ReadFile(const std::string& path, uint64_t max_bytes) override {
    return sb_->ReadFile(path, max_bytes);
  }
  absl::Status WriteFile(const std::string& path, const std::string& data, uint32_t mode) override {
    return sb_->WriteFile(path, data, mode);
  }
  absl::StatusOr<std::vector<tier::FileEntry>> ListDir(const std::string& path) override {
    DSEC_ASSIGN_OR_RETURN(std::vector<agent::DirEntry> entries, sb_->ListDir(path));
    std::vector<tier::FileEntry> out;
    out.reserve(entries.size());
    for (const agent::DirEntry& e : entries) out.push_back({e.name, EntryTypeString(e.type), e.size, e.mode});
    return out;
  }
  // The agent's WATCH (inotify in the guest) on a connection of its own.
  absl::StatusOr<std::unique_ptr<tier::DirWatch>> WatchDir(const std::string& path, bool recursive) override {
    return sb_->WatchDir(path, recursive, tier::kMaxWatchedDirs);
  }
  // The guest's upper directory, copied out through the agent (pack_diff
  // stream) into a fresh directory of the state dir: an overlay upper
  // directory that layers::PackDiff turns into a layer. The copy is made
  // here, while the VM runs; the Service's pause that follows is harmless.
  absl::StatusOr<std::string> UpperDir() override { return sb_->PackDiffDir(); }
  absl::StatusOr<tier::MachineSaved> SaveMachine(const std::string& dest_dir) override {
    DSEC_ASSIGN_OR_RETURN(MachineSaveInfo s, sb_->SaveMachine(dest_dir));
    return tier::MachineSaved{s.memory_bytes, s.memory_bytes_written, s.pause_ms};
  }
  std::shared_ptr<network::SandboxNetwork> network() const override { return network_; }
  absl::Status Destroy() override {
    absl::Status s = sb_->Destroy();
    // The monitor is gone: the filter detaches, the tap and the lease go.
    if (network_ != nullptr) network_->Close();
    return s;
  }

 private:
  std::shared_ptr<network::SandboxNetwork> network_;  // outlives sb_ (member order)
  std::unique_ptr<MicrovmSandbox> sb_;
};

}  // namespace

const tier::TierTraits& MicrovmTierTraits() {
  static const tier::TierTraits kTraits = [] {
    tier::TierTraits t;
    t.name = "microvm";
    // A tap per sandbox with the tap filter (sandbox/network CreateTap).
    t.network = true;
    // The monitor process (its main, vCPU and I/O threads) in a memory
    // cgroup; the daemon holds its pidfd and control connection. An idle
    // Linux guest keeps ~33 MiB of its RAM resident (docs/benchmarks.md,
    // "Host memory of Linux guests"); memory_mib is its limit.
    t.footprint = {.memory_bytes = 36 << 20, .pids = 4, .fds = 3, .cgroups = 1};
    t.network_footprint = {.memory_bytes = 170 << 10, .fds = 16};
    // Saved whole by the monitor (vmm/snapshot); restored clones map the
    // saved memory copy-on-write.
    t.machine_snapshots = true;
    // Streamed stdin and signals through the agent (SIGNAL). Execs overlap,
    // each on an agent connection of its own (the agent serves each on a
    // thread); the files go through the sandbox's own connection, beside
    // them.
    t.exec_control = true;
    t.concurrent_execs = true;
    t.files_beside_exec = true;
    // Commands as argv, run in "/", files kept: the traits' defaults.
    t.default_layers = [](const tier::TierOptions&) { return std::vector<std::string>{"base:bookworm"}; };
    return t;
  }();
  return kTraits;
}

MicrovmTier::MicrovmTier(MicrovmTierOptions options) : options_(std::move(options)) {
  options_.sandbox.state_root = options_.state_root;
  launcher_ = options_.launcher != nullptr ? options_.launcher
                                           : std::make_shared<VmLauncher>(options_.vm);
}

absl::Status MicrovmTier::Availability() const { return launcher_->CheckHost(); }

absl::StatusOr<std::unique_ptr<tier::TierSandbox>> MicrovmTier::Create(const tier::CreateSpec& spec) {
  MicrovmSpec m;
  m.id = spec.id;
  m.layers = spec.images;
  m.memory_mib = spec.memory_mib;
  m.cpus = spec.cpus;
  m.pids = spec.pids;
  m.qos = spec.qos;
  m.machine_staging = spec.machine_staging;
  m.machine = spec.machine;
  if (spec.isolation != nullptr) {
    std::shared_ptr<const sched::SandboxIsolation> iso = spec.isolation;
    m.join = [iso](pid_t pid) { return iso->AddProcess(pid); };
    if (const sched::SandboxCgroup* cg = iso->cgroup(); cg != nullptr) {
      m.placement_cgroups.push_back(cg->cpuset_dir().path());
      if (cg->cpu_dir() != nullptr) m.placement_cgroups.push_back(cg->cpu_dir()->path());
    }
  }
  std::shared_ptr<network::SandboxNetwork> net;
  if (spec.network != nullptr) {
    if (spec.node_network == nullptr) {
      return absl::InternalError("a network was asked for without the node's network");
    }
    // A host that cannot boot the guest says so before a tap is made.
    DSEC_RETURN_IF_ERROR(launcher_->CheckHost());
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<network::SandboxNetwork> n,
                          network::SandboxNetwork::CreateTap(spec.node_network, *spec.network));
    net = std::move(n);
    m.network = LaunchNetwork{net->host_interface(), net->tap_fd(), net->GuestMac(), net->address_cidr(),
                              net->gateway_text()};
  }
  absl::StatusOr<std::unique_ptr<MicrovmSandbox>> sb = MicrovmSandbox::Create(*launcher_, m, options_.sandbox);
  if (!sb.ok()) {
    if (net != nullptr) net->Close();
    return sb.status();
  }
  DSEC_LOG(info, "microvm: sandbox={} {} in {:.1f} ms", spec.id, spec.machine.empty() ? "booted" : "restored",
           (*sb)->boot_ms());
  return std::unique_ptr<tier::TierSandbox>(new MicrovmTierSandbox(std::move(*sb), std::move(net)));
}

absl::Status RemoveOrphanTap(const std::string& tap) {
  DSEC_ASSIGN_OR_RETURN(network::NlSocket host, network::NlSocket::Open());
  absl::Status s = host.DeleteLink(tap);
  if (s.ok()) DSEC_LOG(info, "microvm: removed the orphaned tap {}", tap);
  return s.code() == absl::StatusCode::kNotFound ? absl::OkStatus() : s;
}

absl::StatusOr<int> MicrovmTier::CleanupOrphans() {
  return microvm::CleanupOrphans(options_.state_root, RemoveOrphanTap);
}

void MicrovmTierSetup::AddFlags(CLI::App& app) {
  app.add_option("--microvm-state-dir", state_root_, "microVM sandboxes' state (default /run/dsec-vmm/microvm)");
  app.add_option("--microvm-kernel", kernel_,
                 "Guest kernel of the microvm tier (default <cache>/guest-kernel/current/vmlinux, "
                 "cache ${DSEC_CACHE_DIR:-~/.cache/dsec-vmm})");
  app.add_option("--microvm-rootfs", rootfs_,
                 "Guest root image (dsec-agent as PID 1; default <cache>/guest-image/rootfs.erofs, "
                 "tools/build-guest-image.sh)");
}

absl::StatusOr<std::unique_ptr<tier::Tier>> MicrovmTierSetup::Make() {
  MicrovmTierOptions o;
  if (!state_root_.empty()) o.state_root = state_root_;
  o.vm.kernel = kernel_;
  o.vm.rootfs = rootfs_;
  return std::unique_ptr<tier::Tier>(new MicrovmTier(std::move(o)));
}

}  // namespace dsec::microvm
