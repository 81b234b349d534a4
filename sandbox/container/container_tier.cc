// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/container_tier.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <set>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "base/clock.h"
#include "base/logging.h"
#include "base/scoped_fd.h"
#include "base/status.h"
#include "sandbox/container/cgroup_events.h"
#include "sandbox/container/init_pool.h"
#include "sandbox/container/layer_mounts.h"
#include "sandbox/container/root_files.h"
#include "sandbox/container/sandbox.h"
#include "sandbox/container/state_dir.h"
#include "bpf/device_policy.h"
#include "sandbox/network/policy.h"
#include "sandbox/network/sandbox_network.h"

namespace dsec::container {


namespace {

constexpr char kV1Freezer[] = "/sys/fs/cgroup/freezer";
// A files API write (at most the daemon's upload limit, 64 MiB by default)
// goes at memory speed; this is for a sandbox whose memory is reclaimed hard.
constexpr int64_t kFileWriteTimeoutMs = 60'000;
constexpr char kHybridV2[] = "/sys/fs/cgroup/unified";

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return ErrnoToStatus(absl::StrCat("open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) return ErrnoToStatus(absl::StrCat("open ", path));
  out << text;
  out.flush();
  if (!out) return ErrnoToStatus(absl::StrCat("write ", path));
  return absl::OkStatus();
}

std::set<pid_t> Procs(const std::string& dir) {
  std::set<pid_t> out;
  std::ifstream in(dir + "/cgroup.procs");
  pid_t p;
  while (in >> p) out.insert(p);
  return out;
}

// Where a sandbox is frozen: its own v2 cgroup (pure v2 host), or a
// dedicated freezer cgroup (v1 freezer hierarchy, else hybrid v2) its
// processes are moved into.
struct FreezerPlace {
  std::string dir;
  bool v2 = false;
  bool own = false;  // a directory of the sandbox's own (not ours to remove)
};

std::string DedicatedFreezerDir(const std::string& id, bool* v2) {
  if (Exists(absl::StrCat(kV1Freezer, "/freezer.state")) ||
      Exists(absl::StrCat(kV1Freezer, "/cgroup.procs"))) {
    *v2 = false;
    return absl::StrCat(kV1Freezer, "/", FreezerCgroupName(id));
  }
  *v2 = true;
  return absl::StrCat(kHybridV2, "/", FreezerCgroupName(id));
}

absl::Status WaitFrozen(const FreezerPlace& place) {
  const int64_t deadline = MonotonicNowNs() + 5'000'000'000LL;
  // v2: cgroup.events reports "frozen 1" and the kernel notifies its change.
  if (place.v2) return WaitCgroupEvent(place.dir, "frozen", "1", deadline);
  // v1: freezer.state has no notification that reaches a descriptor (the
  // freezer settles within milliseconds): re-check it until a deadline,
  // writing FROZEN again while it reads FREEZING (that retries a freeze
  // left incomplete).
  for (;;) {
    DSEC_ASSIGN_OR_RETURN(std::string st, ReadText(place.dir + "/freezer.state"));
    if (absl::StripAsciiWhitespace(st) == "FROZEN") return absl::OkStatus();
    DSEC_RETURN_IF_ERROR(WriteText(place.dir + "/freezer.state", "FROZEN"));
    if (MonotonicNowNs() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("freezing ", place.dir, " did not complete"));
    }
    struct timespec ts = {0, 1'000'000};
    nanosleep(&ts, nullptr);
  }
}

class ContainerTierSandbox : public tier::TierSandbox {
 public:
  ContainerTierSandbox(std::unique_ptr<Sandbox> sandbox, std::shared_ptr<uint32_t> range,
                       std::shared_ptr<InitPool> pool)
      : pool_(std::move(pool)), sandbox_(std::move(sandbox)), range_(std::move(range)) {}
  ~ContainerTierSandbox() override { (void)Destroy(); }

  // The sandbox's cgroup v2 directory (its own, or one made for it) and
  // the tier's device policy on it; then its network, if asked for.
  // `ahead`: the network made before the sandbox (CreateAhead), whose
  // namespace its init joined; else one is made now for the namespace the
  // init has.
  absl::Status AddPrograms(const std::shared_ptr<const bpf::DevicePolicy>& devices,
                           network::NodeNetwork* node, const network::NetworkSpec* spec,
                           std::shared_ptr<network::SandboxNetwork> ahead) {
    if (devices == nullptr && spec == nullptr) return absl::OkStatus();
    absl::StatusOr<std::string> dir = SandboxCgroup2Dir(*sandbox_, &made_v2_);
    if (!dir.ok()) {
      if (spec != nullptr) return dir.status();
      // No v2 hierarchy: the sandbox keeps the protection it always had
      // (no CAP_MKNOD, its own /dev), without the device program.
      return absl::OkStatus();
    }
    v2_dir_ = *dir;
    if (devices != nullptr) {
      DSEC_ASSIGN_OR_RETURN(device_attachment_, devices->Attach(v2_dir_));
      devices_ = devices;
    }
    if (ahead) {
      network_ = std::move(ahead);
      DSEC_RETURN_IF_ERROR(network_->AttachTo(v2_dir_));
      DSEC_RETURN_IF_ERROR(WriteResolvConf(*sandbox_, *network_));
    } else if (spec != nullptr) {
      DSEC_ASSIGN_OR_RETURN(network_, AddSandboxNetwork(*sandbox_, v2_dir_, node, *spec));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<tier::ExecOutcome> Exec(const tier::ExecSpec& spec) override {
    ExecOptions o;
    o.argv = spec.argv;
    if (!spec.env.empty()) {
      o.env = SandboxConfig{}.env;
      for (const auto& [k, v] : spec.env) o.env.push_back(absl::StrCat(k, "=", v));
    }
    o.cwd = spec.cwd.empty() ? "/" : spec.cwd;
    o.stdin_data = spec.stdin_data;
    o.timeout_ms = spec.timeout_ms;
    o.output_cap_bytes = spec.output_cap_bytes;
    o.on_output = spec.on_output;
    o.on_spawned = spec.on_spawned;
    o.control = spec.control;
    auto r = sandbox_->Exec(o);
    if (!r.ok() && absl::IsFailedPrecondition(r.status())) {
      // The init died under the command (its memory filled, say): why.
      if (std::optional<std::string> ended = sandbox_->InitEnded()) {
        return absl::FailedPreconditionError(absl::StrCat("the sandbox has ended: ", *ended));
      }
    }
    if (!r.ok()) {
      // Not started inside the sandbox: 127 or 126, as a shell reports it.
      if (std::optional<tier::ExecOutcome> shell = tier::ShellOutcomeOf(r.status())) return *shell;
      return r.status();
    }
    tier::ExecOutcome out;
    out.exit_code = r->exit_code;
    out.signal = r->signal;
    out.timed_out = r->timed_out;
    if (r->timed_out) {
      out.killed_by = "timeout";
    } else if (r->oom_killed && r->signal) {
      out.killed_by = "memory";
    }
    out.stdout_data = std::move(r->stdout_data);
    out.stderr_data = std::move(r->stderr_data);
    out.stdout_dropped = r->stdout_dropped;
    out.stderr_dropped = r->stderr_dropped;
    out.duration_ms = static_cast<double>(r->wall_ns) / 1e6;
    return out;
  }

  absl::Status Pause() override {
    if (paused_) return absl::OkStatus();
    FreezerPlace place;
    for (const std::string& d : sandbox_->cgroups().dirs()) {
      if (Exists(d + "/cgroup.freeze")) place = {d, true, true};
    }
    // The v2 directory made for its programs holds every process of it:
    // freezing there keeps them in it (a dedicated freezer cgroup in the
    // same v2 tree would take them out of reach of the programs).
    if (place.dir.empty() && !v2_dir_.empty() && Exists(v2_dir_ + "/cgroup.freeze")) {
      place = {v2_dir_, true, true};
    }
    if (place.dir.empty()) {
      bool v2 = false;
      place.dir = DedicatedFreezerDir(sandbox_->id(), &v2);
      place.v2 = v2;
      if (!Exists(place.dir)) {
        // Recorded first, like the tier's own cgroups, so that a killed
        // daemon's successor finds it (CleanupOrphans removes
        // recorded cgroups).
        std::ofstream rec(sandbox_->state_dir() + "/cgroups", std::ios::app);
        rec << place.dir << "\n";
        rec.flush();
        if (::mkdir(place.dir.c_str(), 0755) != 0 && errno != EEXIST) {
          return ErrnoToStatus(absl::StrCat("mkdir ", place.dir));
        }
      }
    }
    freezer_ = place;
    // Move every process of the sandbox in, freeze, and repeat while a
    // process forked meanwhile is still outside.
    const std::string members = sandbox_->cgroups().dirs().empty() ? "" : sandbox_->cgroups().dirs()[0];
    for (int round = 0; round < 20; ++round) {
      bool moved = false;
      if (!place.own && !members.empty()) {
        std::set<pid_t> inside = Procs(place.dir);
        for (pid_t p : Procs(members)) {
          if (inside.count(p) != 0) continue;
          moved = true;
          (void)WriteText(place.dir + "/cgroup.procs", std::to_string(p));  // may have exited
        }
      }
      if (!moved && round > 0) break;
      DSEC_RETURN_IF_ERROR(place.v2 ? WriteText(place.dir + "/cgroup.freeze", "1")
                                    : WriteText(place.dir + "/freezer.state", "FROZEN"));
      DSEC_RETURN_IF_ERROR(WaitFrozen(place));
    }
    paused_ = true;
    // Its commands' timeouts stand still with it (exec.h ExecTarget::clock).
    sandbox_->exec_clock().Pause();
    return absl::OkStatus();
  }

  absl::Status Resume() override {
    if (!paused_) return absl::OkStatus();
    DSEC_RETURN_IF_ERROR(freezer_.v2 ? WriteText(freezer_.dir + "/cgroup.freeze", "0")
                                     : WriteText(freezer_.dir + "/freezer.state", "THAWED"));
    paused_ = false;
    sandbox_->exec_clock().Resume();
    return absl::OkStatus();
  }

  // With the sandbox root's rights (root_files.h): in a user namespace
  // that also gives the files the daemon creates an owner that exists
  // there (host root has none, and the idmapped writable layer refuses it).
  absl::StatusOr<std::string> ReadFile(const std::string& path, uint64_t max_bytes) override {
    return ReadRootFile(sandbox_->rootfs_dir(), path, max_bytes, Credentials());
  }
  // The file is found or made here, under the walls of root_files.h; its
  // data is written by a process of the sandbox's own (a copy of its init),
  // so that the pages it takes in the writable layer are charged to the
  // sandbox's memory cgroup, whose limit bounds that layer (upper_store.h),
  // and not to the daemon's, which no limit of the sandbox's bounds.
  absl::Status WriteFile(const std::string& path, const std::string& data, uint32_t mode) override {
    if (paused_) {
      return absl::FailedPreconditionError(
          "the sandbox is paused: resume it to write files (a process of its own writes them)");
    }
    if (std::optional<std::string> ended = sandbox_->InitEnded()) {
      return absl::FailedPreconditionError(absl::StrCat("the sandbox has ended: ", *ended));
    }
    DSEC_ASSIGN_OR_RETURN(ScopedFd fd, OpenRootFileForWrite(sandbox_->rootfs_dir(), path, mode, Credentials()));
    if (data.empty()) return absl::OkStatus();
    absl::Status s = WriteInside(fd.get(), path, data);
    // What was written goes again: a write that did not fit leaves the
    // sandbox its memory back (and an empty file, not a torn one).
    if (!s.ok() && ::ftruncate(fd.get(), 0) != 0) {
      DSEC_LOG(warn, "container: truncating {} after a failed write: {}", path, strerror(errno));
    }
    return s;
  }
  absl::StatusOr<std::vector<tier::FileEntry>> ListDir(const std::string& path) override {
    return ListRootDir(sandbox_->rootfs_dir(), path, Credentials());
  }
  absl::StatusOr<std::unique_ptr<tier::DirWatch>> WatchDir(const std::string& path, bool recursive) override {
    return WatchRootDir(sandbox_->rootfs_dir(), path, recursive, tier::kMaxWatchedDirs, Credentials());
  }
  absl::StatusOr<std::string> UpperDir() override { return sandbox_->upper_dir(); }
  std::shared_ptr<network::SandboxNetwork> network() const override { return network_; }
  std::string UpperXattrPrefix() const override {
    return sandbox_->user_namespace() ? "user.overlay." : "trusted.overlay.";
  }

  std::optional<std::string> Ended() override { return destroyed_ ? std::nullopt : sandbox_->InitEnded(); }

  bool KillExecs() override {
    // Every member of the sandbox's cgroups but its init (a paused sandbox
    // runs no exec: frozen processes would not die before a thaw).
    auto killed = sandbox_->cgroups().KillAll(sandbox_->init_pid(), MonotonicNowNs() + 2'000'000'000LL);
    if (!killed.ok()) DSEC_LOG(warn, "container: kill execs: {}", killed.status().ToString());
    return true;
  }

  absl::Status Destroy() override {
    if (destroyed_) return absl::OkStatus();
    destroyed_ = true;
    // The pool's refill waits (the programs' detachment below takes
    // cgroup_mutex, which a refill's migration holds for a grace period).
    InitPool::OpInFlight in_flight(pool_.get());
    // A frozen process does not die: thaw first.
    if (paused_) (void)Resume();
    absl::Status s = sandbox_->Destroy();
    // Its processes are gone: the programs detach, the veth and the lease
    // go, and its cgroup v2 directory is empty.
    if (network_) network_->Close();
    device_attachment_.reset();
    if (!made_v2_.empty()) {
      if (absl::Status r = KillAndRemoveCgroup(made_v2_); !r.ok()) {
        DSEC_LOG(warn, "container: remove {}: {}", made_v2_, r.ToString());
      }
    }
    if (!freezer_.dir.empty() && !freezer_.own && ::rmdir(freezer_.dir.c_str()) != 0 &&
        errno != ENOENT) {
      DSEC_LOG(warn, "container: rmdir {}: {}", freezer_.dir, strerror(errno));
    }
    return s;
  }

 private:
  FileCredentials Credentials() const { return SandboxFileCredentials(sandbox_->user_namespace()); }

  // `data` into `fd` by a copy of the sandbox's init (exec.h copy_to_fd).
  absl::Status WriteInside(int fd, const std::string& path, const std::string& data) {
    ExecOptions o;
    o.argv = {"(files API write)"};
    o.copy_to_fd = fd;
    o.stdin_data = data;
    o.timeout_ms = kFileWriteTimeoutMs;
    o.output_cap_bytes = 4096;
    absl::StatusOr<ExecResult> r = sandbox_->Exec(o);
    if (!r.ok()) return Annotate(r.status(), absl::StrCat("writing ", path));
    if (r->timed_out) {
      return absl::DeadlineExceededError(
          absl::StrCat("writing ", path, " took longer than ", kFileWriteTimeoutMs / 1000, " s"));
    }
    if (r->signal) {
      if (r->oom_killed) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "the sandbox's memory limit does not hold ", path,
            " (its writable layer is memory): the write was stopped and the file left empty"));
      }
      // The sandbox's own processes can signal it.
      return absl::FailedPreconditionError(absl::StrCat("writing ", path, ": the sandbox's writer was killed by signal ",
                                             *r->signal, "; the file was left empty"));
    }
    if (r->exit_code.value_or(0) != 0) return RootFileWriteError(path, *r->exit_code);
    return absl::OkStatus();
  }

  std::shared_ptr<InitPool> pool_;  // outlives sandbox_ (member order)
  std::unique_ptr<Sandbox> sandbox_;
  std::shared_ptr<uint32_t> range_;  // its host id range (user namespace), given back with it
  std::shared_ptr<network::SandboxNetwork> network_;
  std::string v2_dir_;   // holds all its processes; its BPF programs attach here
  std::string made_v2_;  // v2_dir_ where this object made it (hybrid hosts): removed on destroy
  std::shared_ptr<const bpf::DevicePolicy> devices_;  // outlives the attachment (member order)
  std::unique_ptr<bpf::DeviceAttachment> device_attachment_;
  FreezerPlace freezer_;
  bool paused_ = false;
  bool destroyed_ = false;
};

}  // namespace

absl::StatusOr<std::string> SandboxCgroup2Dir(Sandbox& sandbox, std::string* made_cgroup) {
  // Recorded first, like the tier's own cgroups, so that a killed daemon's
  // successor removes it (CleanupOrphans removes recorded cgroups).
  const std::string records = sandbox.state_dir() + "/cgroups";
  auto record = [&records](const std::string& dir) -> absl::Status {
    std::ofstream rec(records, std::ios::app);
    rec << dir << "\n";
    rec.flush();
    if (!rec) return absl::InternalError("recording the sandbox's cgroup v2 directory in the state dir failed");
    return absl::OkStatus();
  };
  // The init only: everything the sandbox runs is its child.
  return Cgroup2DirFor(sandbox.cgroups(), sandbox.id(), sandbox.init_pid(), record, made_cgroup);
}

absl::StatusOr<std::shared_ptr<network::SandboxNetwork>> AddSandboxNetwork(Sandbox& sandbox,
                                                                           const std::string& cgroup2_dir,
                                                                           network::NodeNetwork* node,
                                                                           const network::NetworkSpec& spec) {
  ScopedFd netns(::open(absl::StrCat("/proc/", sandbox.init_pid(), "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
  if (!netns.valid()) return ErrnoToStatus("open the sandbox's network namespace");
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<network::SandboxNetwork> n,
                        network::SandboxNetwork::Create(node, netns.get(), cgroup2_dir, spec));
  std::shared_ptr<network::SandboxNetwork> net = std::move(n);
  if (absl::Status s = WriteResolvConf(sandbox, *net); !s.ok()) {
    net->Close();
    return s;
  }
  return net;
}

absl::Status WriteResolvConf(Sandbox& sandbox, const network::SandboxNetwork& network) {
  return Annotate(WriteRootFile(sandbox.rootfs_dir(), "/etc/resolv.conf", network.ResolvConf(), 0644,
                                SandboxFileCredentials(sandbox.user_namespace())),
                  "writing /etc/resolv.conf");
}

std::string FreezerCgroupName(const std::string& sandbox_id) {
  return absl::StrCat("dsec-frz-", sandbox_id);
}

const tier::TierTraits& ContainerTierTraits() {
  static const tier::TierTraits kTraits = [] {
    tier::TierTraits t;
    t.name = "container";
    tier::OptionSpec userns;
    userns.name = "user_namespace";
    userns.type = tier::OptionSpec::Type::kBool;
    userns.default_value = false;
    userns.neutral = false;  // other tiers take "false" (clients send it)
    userns.shown = true;     // GET shows it for every sandbox
    t.options = {userns};
    // Commands as argv, run in "/", files kept: the traits' defaults.
    t.default_layers = [](const tier::TierOptions&) { return std::vector<std::string>{"base:bookworm"}; };
    t.network = true;
    // Files through the sandbox's root from the host (root_files.h), not
    // through its init: they need not wait for a running command.
    t.files_beside_exec = true;
    // Execs overlap (each exit on its own report pipe: exec.h) and take
    // streamed stdin and signals (ExecOptions::control).
    t.concurrent_execs = true;
    t.exec_control = true;
    // Measured on idle sandboxes (docs/benchmarks.md, bench density): the
    // init (one task), its memory cgroup and network namespace; the daemon
    // holds the init's control socket only (no pidfd, no BPF link, the
    // writable tmpfs in the mount holder: sandbox.h, bpf/device_policy.h,
    // mount_holder.h). Host memory ~0.6-1.1 MiB, growing with the memory
    // cgroups and superblocks alive (docs/benchmarks.md).
    t.footprint = {.memory_bytes = 1 << 20, .pids = 1, .fds = 1, .cgroups = 1, .netns = 1};
    // The egress policy's programs, links and maps and the namespace's
    // descriptor (17 measured; bench net: ~170 KiB of kernel memory).
    t.network_footprint = {.memory_bytes = 170 << 10, .fds = 17};
    return t;
  }();
  return kTraits;
}

ContainerTier::ContainerTier(ContainerTierOptions options) : options_(std::move(options)) {
  // The device policy every sandbox gets (bpf/device_policy.h): loaded
  // once, attached to each sandbox's cgroup v2 directory.
  if (absl::StatusOr<std::unique_ptr<bpf::DevicePolicy>> d = bpf::DevicePolicy::Load(); d.ok()) {
    absl::Status s;
    for (const bpf::DeviceRule& r : bpf::DefaultSandboxDevices()) {
      if (s.ok()) s = (*d)->Allow(r);
    }
    if (s.ok()) {
      devices_ = std::move(*d);
    } else {
      devices_status_ = s;
    }
  } else {
    devices_status_ = d.status();
  }
  if (!devices_status_.ok()) {
    DSEC_LOG(warn, "container: no device policy program: {}", devices_status_.ToString());
  }
  if (options_.init_pool == 0) return;
  auto pool = InitPool::Create(options_.state_root, options_.init_pool);
  if (pool.ok()) {
    pool_ = std::move(*pool);
  } else {
    // Creates work without it (each from scratch).
    DSEC_LOG(warn, "container: no made-ahead inits: {}", pool.status().ToString());
  }
}

ContainerTier::~ContainerTier() = default;

void ContainerTier::ExpectCreates(size_t n, const tier::TierOptions& options, const std::string& qos) {
  // Sandbox::Create takes no slot for these (init_pool.h).
  if (pool_ == nullptr || !qos.empty() || tier::OptionBool(options, "user_namespace")) return;
  pool_->Expect(n);
}

absl::StatusOr<std::unique_ptr<tier::TierSandbox>> ContainerTier::Create(const tier::CreateSpec& spec) {
  SandboxConfig c;
  c.id = spec.id;
  c.layers = spec.images;
  c.limits.memory_bytes = spec.memory_mib << 20;
  c.limits.pids_max = spec.pids;
  if (spec.cpus > 0) {
    c.limits.cpu_quota_us = static_cast<int64_t>(spec.cpus * static_cast<double>(c.limits.cpu_period_us));
  }
  c.upper_size_bytes = options_.upper_size_bytes;
  c.state_root = options_.state_root;
  c.isolation = spec.isolation;
  c.init_pool = pool_.get();
  // The pool's refill waits until this create is done (its cgroup steps
  // would wait behind the refill's migration).
  InitPool::OpInFlight in_flight(pool_.get());
  std::shared_ptr<uint32_t> range;
  if (tier::OptionBool(spec.options, "user_namespace")) {
    DSEC_ASSIGN_OR_RETURN(range, TakeRange());
    c.user_namespace = UserNamespaceMap{*range, *range, kRangeIds};
  }
  if (spec.network && spec.node_network == nullptr) {
    return absl::InternalError("a network was asked for without the node's network");
  }
  std::shared_ptr<network::SandboxNetwork> ahead;
  if (spec.network && !c.user_namespace) {
    // The network first, in a namespace wired ahead that the init joins:
    // the create then waits for no netlink call (sandbox_network.h).
    absl::StatusOr<std::unique_ptr<network::SandboxNetwork>> n =
        network::SandboxNetwork::CreateAhead(spec.node_network, *spec.network);
    if (!n.ok()) return Annotate(n.status(), "network");
    ahead = std::move(*n);
    c.netns_fd = ahead->netns_fd();
  }
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<Sandbox> sb, Sandbox::Create(std::move(c)));
  auto out = std::make_unique<ContainerTierSandbox>(std::move(sb), std::move(range), pool_);
  // All or nothing: a sandbox whose policy cannot be enforced is not
  // handed out (its destructor removes what was made).
  DSEC_RETURN_IF_ERROR(Annotate(out->AddPrograms(devices_, spec.node_network, spec.network.get(), std::move(ahead)),
                                spec.network ? "network" : "device policy"));
  return std::unique_ptr<tier::TierSandbox>(std::move(out));
}

bool ContainerTier::WaitInitsReady(size_t n, int64_t timeout_ms) const {
  return pool_ != nullptr && pool_->WaitReady(n, timeout_ms);
}

uint64_t ContainerTier::inits_taken() const { return pool_ == nullptr ? 0 : pool_->stats().taken; }

absl::StatusOr<std::shared_ptr<uint32_t>> ContainerTier::TakeRange() {
  std::lock_guard<std::mutex> lock(*ranges_mu_);
  for (uint32_t i = 0; i < kMaxRanges; ++i) {
    const uint32_t base = kFirstHostId + i * kRangeIds;
    if (ranges_->count(base) != 0) continue;
    ranges_->insert(base);
    // The holder may outlive the tier (a sandbox destroyed late): it keeps
    // the set and its lock alive.
    return std::shared_ptr<uint32_t>(new uint32_t(base),
                                     [mu = ranges_mu_, ranges = ranges_](uint32_t* b) {
                                       std::lock_guard<std::mutex> l(*mu);
                                       ranges->erase(*b);
                                       delete b;
                                     });
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("all ", kMaxRanges, " user-namespace id ranges are in use"));
}

absl::StatusOr<int> ContainerTier::CleanupOrphans() {
  OrphanCleanupOptions o;
  // A paused orphan's processes are frozen and cannot die: thaw its freezer
  // cgroup (v1, or the hybrid v2 tree) first.
  o.before_kill = [](const std::string& id) {
    for (const std::string& root : {std::string(kV1Freezer), std::string(kHybridV2)}) {
      const std::string dir = absl::StrCat(root, "/", FreezerCgroupName(id));
      if (!Exists(dir)) continue;
      if (Exists(dir + "/freezer.state")) (void)WriteText(dir + "/freezer.state", "THAWED");
      if (Exists(dir + "/cgroup.freeze")) (void)WriteText(dir + "/cgroup.freeze", "0");
    }
  };
  return container::CleanupOrphans(options_.state_root, o);
}

void ContainerTier::LayerRemoved(const std::string& image) { LayerMountCache::Default().Forget(image); }

std::string ContainerTier::MetricsText() const {
  size_t ranges = 0;
  {
    std::lock_guard<std::mutex> lock(*ranges_mu_);
    ranges = ranges_->size();
  }
  std::string text = absl::StrFormat(
      "# HELP dsec_container_user_namespace_ranges Host id ranges held by user-namespace sandboxes.\n"
      "# TYPE dsec_container_user_namespace_ranges gauge\n"
      "dsec_container_user_namespace_ranges %d\n"
      "# HELP dsec_container_device_policy 1 if every container sandbox gets the cgroup_device program.\n"
      "# TYPE dsec_container_device_policy gauge\n"
      "dsec_container_device_policy %d\n",
      ranges, devices_ != nullptr ? 1 : 0);
  if (pool_ != nullptr) {
    const InitPoolStats s = pool_->stats();
    absl::StrAppendFormat(
        &text,
        "# HELP dsec_container_init_pool_ready Made-ahead sandbox inits ready now.\n"
        "# TYPE dsec_container_init_pool_ready gauge\n"
        "dsec_container_init_pool_ready %d\n"
        "# HELP dsec_container_init_pool_taken_total Creates that took a made-ahead init.\n"
        "# TYPE dsec_container_init_pool_taken_total counter\n"
        "dsec_container_init_pool_taken_total %d\n"
        "# HELP dsec_container_init_pool_misses_total Creates that could have taken a made-ahead init and found none.\n"
        "# TYPE dsec_container_init_pool_misses_total counter\n"
        "dsec_container_init_pool_misses_total %d\n",
        s.ready, s.taken, s.misses);
  }
  return text;
}

ContainerTierSetup::ContainerTierSetup() {
  options_.state_root = kDefaultStateRoot;
  options_.init_pool = 2;
}

void ContainerTierSetup::AddFlags(CLI::App& app) {
  app.add_option("--container-state-dir", options_.state_root, "Container sandboxes' state")
      ->capture_default_str();
  app.add_option("--container-init-pool", options_.init_pool,
                 "Container sandbox inits made ahead and kept ready (0: each create from scratch)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--upper-mib", upper_mib_, "Writable layer size of container sandboxes")->capture_default_str();
}

absl::StatusOr<std::unique_ptr<tier::Tier>> ContainerTierSetup::Make() {
  options_.upper_size_bytes = upper_mib_ << 20;
  // The default root lives on a tmpfs of its own (state_dir.h), made here
  // with its parent; another root is the operator's (made if missing).
  if (options_.state_root == kDefaultStateRoot) ::mkdir("/run/dsec-vmm", 0755);
  ::mkdir(options_.state_root.c_str(), 0700);
  if (options_.state_root == kDefaultStateRoot) {
    if (auto m = MountStateRootTmpfs(options_.state_root); !m.ok()) {
      DSEC_LOG(warn, "container: state root on tmpfs: {}", m.status().ToString());
    }
  }
  return std::unique_ptr<tier::Tier>(new ContainerTier(options_));
}

}  // namespace dsec::container
