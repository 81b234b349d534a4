// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/sandbox.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/file_io.h"
#include "sandbox/container/cgroup_events.h"
#include "sandbox/container/child_process.h"
#include "sandbox/container/init_launch.h"
#include "sandbox/container/init_pool.h"
#include "sandbox/container/netns_pool.h"
#include "sandbox/container/upper_store.h"
#include "sched/isolation.h"
#include "base/fd_passing.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::container {

namespace {

absl::Status ValidateConfig(const SandboxConfig& c) {
  if (c.id.empty() || c.id.size() > 64) {
    return absl::InvalidArgumentError(absl::StrCat("sandbox id \"", c.id, "\" must be 1-64 chars"));
  }
  // Names beginning with a dot are the init pool's (".slot-", ".dead-").
  if (c.id[0] == '.') {
    return absl::InvalidArgumentError(
        absl::StrCat("sandbox id \"", c.id, "\" may not begin with '.'"));
  }
  for (char ch : c.id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' &&
        ch != '.') {
      return absl::InvalidArgumentError(
          absl::StrCat("sandbox id \"", c.id, "\" may hold only [A-Za-z0-9_.-]"));
    }
  }
  if (c.layers.empty()) return absl::InvalidArgumentError("a sandbox needs at least one layer");
  DSEC_RETURN_IF_ERROR(CheckLayerFiles(c.layers));
  if (c.hostname.empty() || c.hostname.size() > 64) {
    return absl::InvalidArgumentError("hostname must be 1-64 chars");
  }
  if (c.upper_size_bytes < (1 << 20)) {
    return absl::InvalidArgumentError("upper_size_bytes must be at least 1 MiB");
  }
  if (c.user_namespace) DSEC_RETURN_IF_ERROR(ValidateUserNamespaceMap(*c.user_namespace));
  if (c.netns_fd >= 0 && c.user_namespace) {
    // Its init makes its namespaces inside the user namespace.
    return absl::InvalidArgumentError("a given network namespace and a user namespace do not go together");
  }
  return absl::OkStatus();
}

absl::Status Mkdir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoToStatus(absl::StrCat("mkdir ", path));
  }
  return absl::OkStatus();
}

// The default profile is the same for every sandbox: compile it once.
absl::StatusOr<const SeccompProgram*> DefaultSeccomp() {
  static const absl::StatusOr<SeccompProgram>* program =
      new absl::StatusOr<SeccompProgram>(BuildDefaultSeccompProgram());
  if (!program->ok()) return program->status();
  return &**program;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Sandbox>> Sandbox::Create(SandboxConfig config) {
  DSEC_RETURN_IF_ERROR(ValidateConfig(config));
  DSEC_ASSIGN_OR_RETURN(const SeccompProgram* seccomp, DefaultSeccomp());
  DSEC_ASSIGN_OR_RETURN(std::string init_binary, FindSandboxInit(config.init_binary));
  // A made-ahead init, where this sandbox can use one (init_pool.h).
  const bool slot_fits = config.init_pool != nullptr && !config.isolation &&
                         !config.user_namespace &&
                         config.init_pool->state_root() == config.state_root &&
                         config.init_pool->init_binary() == init_binary;
  std::optional<InitSlot> slot = slot_fits ? config.init_pool->Take() : std::nullopt;
  StateDir state;
  if (slot) {
    DSEC_RETURN_IF_ERROR(slot->state.RenameTo(config.id));
    state = std::move(slot->state);
  } else {
    DSEC_ASSIGN_OR_RETURN(state, StateDir::Create(config.state_root, config.id));
  }
  ScopedFd netns;
  if (config.netns_fd >= 0) {
    netns.Reset(::fcntl(config.netns_fd, F_DUPFD_CLOEXEC, 3));
    if (!netns) return ErrnoToStatus("the given network namespace");
    config.netns_fd = netns.get();
  }
  std::unique_ptr<Sandbox> sb(new Sandbox(std::move(config), std::move(state)));
  sb->netns_ = std::move(netns);
  sb->seccomp_ = seccomp;
  sb->init_binary_ = std::move(init_binary);
  // Any error below destroys `sb`, which undoes what was done so far.
  const std::string& dir = sb->state_.path();
  LayerMountCache& cache =
      sb->config_.layer_cache ? *sb->config_.layer_cache : LayerMountCache::Default();
  // Own mounts (no sharing here) go below the state dir, where orphan
  // cleanup finds them; shared ones are detached and need no directory.
  if (!cache.sharing()) DSEC_RETURN_IF_ERROR(Mkdir(absl::StrCat(dir, "/layers")));
  for (size_t i = 0; i < sb->config_.layers.size(); ++i) {
    DSEC_ASSIGN_OR_RETURN(auto layer,
                          cache.Acquire(sb->config_.layers[i], absl::StrCat(dir, "/layers/", i)));
    sb->layers_.push_back(std::move(layer));
  }
  if (sb->config_.user_namespace) {
    // The namespace first: the idmapped views of the layers need it, and
    // they must be attached before the init's mount namespace is made.
    DSEC_ASSIGN_OR_RETURN(sb->userns_, MakeUserNamespace(*sb->config_.user_namespace));
    // Under ns/ (0755), which root in the namespace can search: the init
    // names everything relative to it (InitConfig::cwd).
    DSEC_RETURN_IF_ERROR(Mkdir(absl::StrCat(dir, "/ns")));
    DSEC_RETURN_IF_ERROR(Mkdir(absl::StrCat(dir, "/ns/lower")));
    DSEC_RETURN_IF_ERROR(Mkdir(absl::StrCat(dir, "/ns/merged")));
    for (size_t i = 0; i < sb->layers_.size(); ++i) {
      std::string target = absl::StrCat(dir, "/ns/lower/", i);
      DSEC_RETURN_IF_ERROR(Mkdir(target));
      DSEC_ASSIGN_OR_RETURN(Mount m,
                            Mount::Idmapped(sb->layers_[i]->lower_dir(), sb->userns_.get(), target));
      sb->idmapped_layers_.push_back(std::move(m));
    }
    DSEC_RETURN_IF_ERROR(Mkdir(absl::StrCat(dir, "/ns/upper")));
  }
  DSEC_RETURN_IF_ERROR(Mkdir(absl::StrCat(dir, "/upper")));
  DSEC_RETURN_IF_ERROR(Mkdir(absl::StrCat(dir, "/merged")));
  DSEC_RETURN_IF_ERROR(sb->MountUpperAndOverlay());
  const StateDir& st = sb->state_;
  bool started = false;
  if (slot) {
    sb->cgroups_ = std::move(slot->cgroups);
    if (absl::Status s = sb->cgroups_.ApplyLimits(sb->config_.limits); !s.ok()) {
      // The slot's init is in these cgroups: gone before `sb` removes them.
      slot->KillInit();
      return s;
    }
    DSEC_ASSIGN_OR_RETURN(started, sb->StartSlotInit(*slot));
  } else {
    DSEC_ASSIGN_OR_RETURN(
        sb->cgroups_,
        ContainerCgroups::Create(sb->config_.id, sb->config_.limits, sb->config_.isolation != nullptr,
                                 [&st](const std::string& d) { return st.RecordCgroup(d); }));
    DSEC_RETURN_IF_ERROR(sb->JoinIsolationCgroups());
  }
  if (!started) DSEC_RETURN_IF_ERROR(sb->StartInit());
  DSEC_LOG(debug, "container: created sandbox={} init={} layers={}", sb->config_.id, sb->init_pid_,
           sb->layers_.size());
  return sb;
}

Sandbox::~Sandbox() {
  if (absl::Status s = Destroy(); !s.ok()) {
    DSEC_LOG(warn, "container: sandbox={} destroy: {}", config_.id, s.ToString());
  }
}

std::string Sandbox::rootfs_dir() const {
  if (init_pid_ > 0) return absl::StrCat("/proc/", init_pid_, "/root");
  return absl::StrCat(state_.path(), "/merged");
}

bool Sandbox::used_loop_devices() const {
  for (const auto& m : layers_) {
    if (m->used_loop_device()) return true;
  }
  return false;
}

absl::Status Sandbox::JoinIsolationCgroups() {
  const sched::SandboxCgroup* qos = config_.isolation ? config_.isolation->cgroup() : nullptr;
  if (qos == nullptr) return absl::OkStatus();
  // The QoS cgroup belongs to the isolation's owner, but a runtime killed
  // before it removes it leaves it with our processes inside: recorded, so
  // that CleanupOrphans removes it like our own.
  DSEC_RETURN_IF_ERROR(state_.RecordCgroup(qos->cpuset_dir().path()));
  const sched::CgroupDir* cpu = qos->cpu_dir() != nullptr ? qos->cpu_dir() : &qos->cpuset_dir();
  if (qos->cpu_dir() != nullptr) DSEC_RETURN_IF_ERROR(state_.RecordCgroup(cpu->path()));
  // The isolation owns the cpu controller (ContainerCgroups skipped it):
  // the sandbox's CPU quota goes there.
  const ResourceLimits& l = config_.limits;
  if (!l.cpu_quota_us) return absl::OkStatus();
  if (cpu->version() == sched::CgroupVersion::kV1) {
    DSEC_RETURN_IF_ERROR(cpu->Write("cpu.cfs_period_us", absl::StrCat(l.cpu_period_us)));
    return cpu->Write("cpu.cfs_quota_us", absl::StrCat(*l.cpu_quota_us));
  }
  return cpu->Write("cpu.max", absl::StrCat(*l.cpu_quota_us, " ", l.cpu_period_us));
}

ScopedFd Sandbox::BindForDev(const std::string& dir) {
  ScopedFd clone(::open_tree(AT_FDCWD, dir.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (!clone) return clone;
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC;
  attr.attr_clr = MOUNT_ATTR_NODEV;
  if (::mount_setattr(clone.get(), "", AT_EMPTY_PATH, &attr, sizeof(attr)) != 0) clone.Reset();
  return clone;
}

absl::Status Sandbox::ReleaseHeldUpper() {
  if (!store_dir_.empty()) {
    // Only once the sandbox's processes are gone (the callers reap the init
    // first): none can write there any more.
    absl::Status s = UpperStore::Default()->Remove(store_dir_);
    store_dir_.clear();
    return s;
  }
  if (held_upper_.empty()) return absl::OkStatus();
  MountHolder* holder = MountHolder::Default();
  absl::Status s = holder != nullptr ? holder->Detach(held_upper_) : absl::OkStatus();
  held_upper_.clear();
  return s;
}

bool Sandbox::UpperFitsStore() const {
  return config_.limits.memory_bytes != 0 && config_.limits.memory_bytes <= config_.upper_size_bytes;
}

absl::Status Sandbox::MountUpperAndOverlay() {
  const std::string& dir = state_.path();
  std::vector<std::string> lowers;
  if (!config_.user_namespace) {
    // The overlay is made here and attached only by the init in its mount
    // namespace; so is the writable layer's tmpfs where the kernel takes
    // an upper on a detached mount (Linux 6.15+, as for the layers). Then
    // the host's mount table (which every new mount namespace copies, so
    // that each create and each sandbox's namespace would cost more with
    // every sandbox alive) does not grow with the sandboxes, and nothing
    // is left to unmount; the daemon reaches the upper through the
    // detached tmpfs's descriptor. Older kernels get it at <state>/upper.
    std::string upper_root;
    const bool detached = OverlayAcceptsDetachedLayers();
    UpperStore* store = detached && UpperFitsStore() ? UpperStore::Default() : nullptr;
    if (store != nullptr) {
      // A directory of the shared store (upper_store.h): no file system
      // of its own, no mount to make or to undo.
      DSEC_ASSIGN_OR_RETURN(store_dir_, store->Make(config_.id));
      upper_root = store->PathOf(store_dir_);
    } else if (detached) {
      DSEC_ASSIGN_OR_RETURN(upper_tmpfs_, DetachedMount::Tmpfs(config_.upper_size_bytes, false));
      upper_root = upper_tmpfs_.path();
    } else {
      upper_root = absl::StrCat(dir, "/upper");
      DSEC_ASSIGN_OR_RETURN(upper_, Mount::Tmpfs(upper_root, config_.upper_size_bytes));
    }
    upper_dir_ = absl::StrCat(upper_root, "/upper");
    const std::string work = absl::StrCat(upper_root, "/work");
    DSEC_RETURN_IF_ERROR(Mkdir(upper_dir_));
    DSEC_RETURN_IF_ERROR(Mkdir(work));
    // The init builds /dev in a directory of this tmpfs, bound (devices
    // allowed there, no suid, no exec), rather than in a tmpfs of its own:
    // one superblock less per sandbox. Made here, while the tmpfs is
    // detached (a mount in the holder's namespace cannot be cloned from
    // this one); without it the init mounts a tmpfs.
    const std::string dev = absl::StrCat(upper_root, "/dev");
    DSEC_RETURN_IF_ERROR(Mkdir(dev));
    dev_mount_ = BindForDev(dev);
    for (const auto& m : layers_) lowers.push_back(m->lower_dir());
    DSEC_ASSIGN_OR_RETURN(root_mount_, DetachedMount::Overlay(lowers, upper_dir_, work));
    // The tmpfs goes to the process's mount holder (mount_holder.h), so
    // that the sandbox keeps no descriptor for it; without one it stays
    // reached by its descriptor.
    if (MountHolder* holder = detached && store == nullptr ? MountHolder::Default() : nullptr;
        holder != nullptr) {
      const std::string name = absl::StrCat("upper-", config_.id);
      DSEC_ASSIGN_OR_RETURN(std::string held, holder->Attach(upper_tmpfs_.fd(), name));
      held_upper_ = name;
      upper_tmpfs_.Reset();
      upper_dir_ = absl::StrCat(held, "/upper");
    }
    return absl::OkStatus();
  }
  std::string upper_root = absl::StrCat(dir, "/upper");
  DSEC_ASSIGN_OR_RETURN(upper_, Mount::Tmpfs(upper_root, config_.upper_size_bytes));
  upper_dir_ = absl::StrCat(upper_root, "/upper");
  DSEC_RETURN_IF_ERROR(Mkdir(upper_dir_));
  DSEC_RETURN_IF_ERROR(Mkdir(absl::StrCat(upper_root, "/work")));
  // The overlay is mounted by the init, inside the namespace, over the
  // idmapped views (a mounter outside could not create files through them:
  // its ids have no mapping there). Overlay metadata goes in user.overlay.*
  // xattrs there (pack_diff reads both forms).
  DSEC_ASSIGN_OR_RETURN(idmapped_upper_, Mount::Idmapped(upper_root, userns_.get(),
                                                         absl::StrCat(dir, "/ns/upper")));
  // Relative to <state>/ns (InitConfig::cwd).
  for (size_t i = 0; i < idmapped_layers_.size(); ++i) lowers.push_back(absl::StrCat("lower/", i));
  DSEC_ASSIGN_OR_RETURN(overlay_data_, Mount::OverlayData(lowers, "upper/upper", "upper/work"));
  absl::StrAppend(&overlay_data_, ",userxattr");
  return absl::OkStatus();
}

InitConfig Sandbox::BaseInitConfig() const {
  InitConfig config;
  config.merged = absl::StrCat(state_.path(), "/merged");
  config.hostname = config_.hostname;
  config.nofile = config_.nofile;
  config.seccomp = seccomp_->filter;
  return config;
}

absl::StatusOr<bool> Sandbox::StartSlotInit(InitSlot& slot) {
  InitConfig config = BaseInitConfig();
  config.overlay_on_control = true;
  // The slot's init is in a namespace of its own; a wired one replaces it.
  config.netns_on_control = config_.netns_fd >= 0;
  absl::StatusOr<ScopedFd> sys = CloneSharedSysfs();
  config.sys_on_control = sys.ok();
  config.dev_on_control = dev_mount_.valid();
  DSEC_RETURN_IF_ERROR(ValidateInitConfig(config));
  const std::string encoded = EncodeInitConfig(config);
  // Fits the pipe's buffer (ValidateInitConfig's bounds): never blocks.
  // The root, the network namespace, the sysfs, the /dev directory
  // (init_protocol.h).
  int fds[4] = {root_mount_.fd(), -1, -1, -1};
  size_t nfds = 1;
  if (config.netns_on_control) fds[nfds++] = config_.netns_fd;
  if (config.sys_on_control) fds[nfds++] = sys->get();
  if (config.dev_on_control) fds[nfds++] = dev_mount_.get();
  bool taken = WriteNoSigpipe(slot.config_write.get(), encoded.data(), encoded.size()) ==
                   static_cast<ssize_t>(encoded.size()) &&
               SendWithFds(slot.control.get(), "r", 1, fds, nfds) == 1;
  if (!taken) {
    // The slot's init is gone (killed, or out of pids): start a new one.
    DSEC_LOG(warn, "container: sandbox={} made-ahead init did not answer; starting one", config_.id);
    slot.KillInit();
    return false;
  }
  slot.config_write.Reset();
  init_pid_ = slot.init_pid;
  slot.init_pidfd.Reset();  // see StopInit: the pid is enough for a child of ours
  slot.init_pid = 0;
  ChildError e{};
  ssize_t n;
  do {
    n = ::read(slot.report_read.get(), &e, sizeof(e));
  } while (n < 0 && errno == EINTR);
  if (n != sizeof(e)) {
    // It died before its report (killed while it waited): the same as a
    // slot that took nothing.
    DSEC_LOG(warn, "container: sandbox={} made-ahead init died; starting one", config_.id);
    (void)StopInit();
    return false;
  }
  if (e.step != 0) {
    (void)StopInit();
    return ErrnoToStatus(absl::StrCat("sandbox init: ", ChildStepName(e.step)), e.err);
  }
  init_control_ = std::move(slot.control);
  root_mount_.Reset();  // the init's mount namespace holds it now
  dev_mount_.Reset();
  return true;
}

absl::Status Sandbox::StartInit() {
  DSEC_ASSIGN_OR_RETURN(InitChannels ch, InitChannels::Create());
  InitConfig config = BaseInitConfig();
  InitFds fds = ch.fds();
  ScopedFd netns;
  absl::StatusOr<ScopedFd> sys = CloneSharedSysfs();
  uint64_t flags = 0;
  if (config_.user_namespace) {
    // The init makes every namespace inside the user namespace itself.
    config.join_userns = true;
    config.overlay = overlay_data_;
    config.cwd = absl::StrCat(state_.path(), "/ns");
    config.merged = "merged";
    fds.userns = userns_.get();
  } else {
    config.overlay_on_control = true;
    config.sys_on_control = sys.ok();
    config.dev_on_control = dev_mount_.valid();
    if (config_.netns_fd >= 0) {
      // The caller's (already wired: sandbox/network).
      config.join_netns = true;
      fds.netns = config_.netns_fd;
    } else {
      // A namespace made ahead of time if one is ready (netns_pool.h).
      netns = NetnsPool::Default().Take();
      config.join_netns = netns.valid();
      fds.netns = netns.get();
    }
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC;
    if (!config.join_netns) flags |= CLONE_NEWNET;
  }
  DSEC_ASSIGN_OR_RETURN(LaunchedInit init, LaunchInit(init_binary_, &config, fds, flags));
  netns.Reset();
  ch.CloseInitEnds();
  if (config_.user_namespace) {
    // The launched process forked PID 1 (our child too: CLONE_PARENT),
    // said its pid and exits.
    ChildError forked{};
    ssize_t n;
    do {
      n = ::read(ch.report_read.get(), &forked, sizeof(forked));
    } while (n < 0 && errno == EINTR);
    siginfo_t info{};
    while (::waitid(static_cast<idtype_t>(3) /* P_PIDFD */, static_cast<id_t>(init.pidfd.get()),
                    &info, WEXITED) != 0 &&
           errno == EINTR) {
    }
    if (n != sizeof(forked)) return absl::InternalError("sandbox init died before forking");
    if (forked.step != kForked) {
      return ErrnoToStatus(absl::StrCat("sandbox init: ", ChildStepName(forked.step)), forked.err);
    }
    init.pid = forked.err;
    init.pidfd.Reset(static_cast<int>(::syscall(SYS_pidfd_open, init.pid, 0)));
    if (!init.pidfd) {
      absl::Status s = ErrnoToStatus("pidfd_open sandbox init");
      ::kill(init.pid, SIGKILL);
      while (::waitpid(init.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      return s;
    }
  }
  init_pid_ = init.pid;
  init.pidfd.Reset();  // see StopInit: the pid is enough for a child of ours
  absl::Status joined;
  if (config.overlay_on_control) {
    // The root, the sysfs, the /dev directory (init_protocol.h).
    int root_fds[3] = {root_mount_.fd(), -1, -1};
    size_t nfds = 1;
    if (config.sys_on_control) root_fds[nfds++] = sys->get();
    if (config.dev_on_control) root_fds[nfds++] = dev_mount_.get();
    if (SendWithFds(ch.control_ours.get(), "r", 1, root_fds, nfds) != 1) {
      joined = ErrnoToStatus("sandbox init: send its root");
    }
  }

  // One cgroup migration per sandbox: every exec process is the init's
  // child, born in its cgroups.
  if (joined.ok()) joined = cgroups_.AddProcess(init_pid_);
  if (joined.ok() && config_.isolation) joined = config_.isolation->AddProcess(init_pid_);
  if (joined.ok()) {
    if (absl::Status s = ShieldInitFromOom(init_pid_); !s.ok()) {
      DSEC_LOG_RATELIMITED(warn, 1, "container: sandbox={}: {}", config_.id, s.ToString());
    }
  }
  char one = 1;
  // An init that failed to exec is gone: no SIGPIPE for that.
  if (joined.ok() && WriteNoSigpipe(ch.go_write.get(), &one, 1) != 1) {
    joined = ErrnoToStatus("start init");
  }
  ch.go_write.Reset();
  // The report: ready, or the step that failed (an execve failure of the
  // launch too, which is why a failed join above still looks here: the
  // init is then gone, and its reason is the better error).
  if (!joined.ok()) ::fcntl(ch.report_read.get(), F_SETFL, O_NONBLOCK);
  ChildError e{};
  ssize_t n;
  do {
    n = ::read(ch.report_read.get(), &e, sizeof(e));
  } while (n < 0 && errno == EINTR);
  if (n == sizeof(e) && e.step != 0) {
    joined = ErrnoToStatus(absl::StrCat("sandbox init: ", ChildStepName(e.step)), e.err);
  } else if (joined.ok() && n != sizeof(e)) {
    joined = absl::InternalError("sandbox init died before reporting");
  }
  if (joined.ok()) joined = state_.RecordInit(init_pid_);
  if (!joined.ok()) {
    (void)StopInit();
    return joined;
  }
  init_control_ = std::move(ch.control_ours);
  root_mount_.Reset();  // the init's mount namespace holds it now
  dev_mount_.Reset();
  return absl::OkStatus();
}

absl::Status Sandbox::StopInit() {
  init_control_.Reset();
  if (init_pid_ <= 0) return absl::OkStatus();
  // The init is this process's child (launched here, or forked with
  // CLONE_PARENT), reaped only here, and nothing in the daemon reaps
  // children it did not start or ignores SIGCHLD: until this waitid its
  // pid cannot name another process, so the sandbox holds no pidfd (a
  // descriptor per sandbox counts against the daemon's open-file limit
  // on a node of thousands).
  // SIGKILL to a pid namespace's init kills every process in it.
  ::kill(init_pid_, SIGKILL);
  ReapChild(init_pid_);
  init_pid_ = 0;
  // Every process of the sandbox died with its pid namespace; kill what
  // is left in the cgroups outside it (none is expected).
  auto killed = cgroups_.KillAll(0, MonotonicNowNs() + 5'000'000'000);
  return killed.ok() ? absl::OkStatus() : killed.status();
}

std::optional<std::string> Sandbox::InitEnded() const {
  if (destroyed_ || init_pid_ <= 0) return std::nullopt;
  siginfo_t info{};
  // WNOWAIT: looked at, not reaped (the pid stays the init's until StopInit).
  if (::waitid(P_PID, init_pid_, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != init_pid_) {
    return std::nullopt;
  }
  if (info.si_code == CLD_EXITED) return absl::StrCat("its init exited with status ", info.si_status);
  if (info.si_status == SIGKILL && cgroups_.OomKills() > 0) {
    return std::string(
        "its init was killed by the sandbox's memory cgroup's OOM killer: its memory, writable layer included, "
        "was full");
  }
  return absl::StrCat("its init was killed by signal ", info.si_status);
}

absl::StatusOr<ExecResult> Sandbox::Exec(const ExecOptions& options) {
  if (destroyed_ || init_pid_ <= 0) return absl::FailedPreconditionError("sandbox is not running");
  ExecTarget target;
  target.cgroups = &cgroups_;
  target.init_pid = init_pid_;
  target.init_control_fd = init_control_.get();
  target.default_env = &config_.env;
  target.shared = &exec_shared_;
  target.clock = &exec_clock_;
  return RunExec(target, options);
}

absl::Status Sandbox::Reset() {
  if (destroyed_) return absl::FailedPreconditionError("sandbox destroyed");
  DSEC_RETURN_IF_ERROR(StopInit());
  DSEC_RETURN_IF_ERROR(idmapped_upper_.Unmount());
  DSEC_RETURN_IF_ERROR(upper_.Unmount());
  upper_tmpfs_.Reset();
  DSEC_RETURN_IF_ERROR(ReleaseHeldUpper());
  DSEC_RETURN_IF_ERROR(MountUpperAndOverlay());
  return StartInit();
}

absl::Status Sandbox::Destroy() {
  if (destroyed_) return absl::OkStatus();
  destroyed_ = true;
  // With a pool for this root, the init is killed here and reaped by the
  // pool's thread (InitPool::Retire), so that the exits of sandboxes
  // destroyed together overlap. Not with a QoS placement: its owner
  // removes the placement's cgroups once this returns, which needs the
  // processes gone.
  const bool retire = config_.init_pool != nullptr && config_.init_pool->state_root() == config_.state_root;
  pid_t killed_init = 0;
  absl::Status first;
  if (retire && !config_.isolation && init_pid_ > 0) {
    init_control_.Reset();
    ::kill(init_pid_, SIGKILL);  // a pid namespace's init: every process in it dies
    killed_init = init_pid_;
    init_pid_ = 0;
  } else {
    first = StopInit();
  }
  auto note = [&first](absl::Status s) {
    if (!s.ok() && first.ok()) first = s;
  };
  root_mount_.Reset();
  dev_mount_.Reset();
  note(idmapped_upper_.Unmount());
  note(upper_.Unmount());
  upper_tmpfs_.Reset();
  // A killed init not yet reaped: its processes may still be finishing a
  // write into the shared store's directory, which goes after the reap.
  std::string store_dir_after_reap;
  if (killed_init > 0) store_dir_after_reap = std::exchange(store_dir_, std::string());
  note(ReleaseHeldUpper());
  for (auto it = idmapped_layers_.rbegin(); it != idmapped_layers_.rend(); ++it) {
    note(it->Unmount());
  }
  idmapped_layers_.clear();
  userns_.Reset();
  netns_.Reset();
  // A shared layer stays mounted for the next sandbox; an own one (no
  // sharing here) is unmounted with its last reference.
  layers_.clear();
  // With a pool for this root, its thread removes the cgroups and the state
  // directory (init_pool.h: rmdirs here could wait out a refill's grace
  // period); the directory is renamed first so that the id is free now.
  static std::atomic<uint64_t> tombstones{0};
  if (retire && first.ok()) {
    if (state_.RenameTo(absl::StrCat(".dead-", ::getpid(), "-", tombstones++)).ok()) {
      config_.init_pool->Retire(std::move(state_), std::move(cgroups_), killed_init,
                                std::move(store_dir_after_reap));
      return first;
    }
  }
  if (killed_init > 0) {
    ReapChild(killed_init);  // not retired after all: reaped here
    if (!store_dir_after_reap.empty()) note(UpperStore::Default()->Remove(store_dir_after_reap));
  }
  // A killed task keeps its cgroup busy until it has finished exiting and
  // its parent has reaped it, which on a loaded host can outlast
  // KillAndRemoveCgroup's quick retries (bench container leaked cgroups
  // under CI load): retry what is left, for up to ~0.8 s. A v2 cgroup says
  // when it is empty (cgroup.events "populated 0", notified): wait for
  // that. v1 has no notification that reaches a descriptor, and the
  // members' pidfds fire at their exit, before the reap: there the wait is
  // a growing pause.
  std::vector<std::string> cgroup_dirs = cgroups_.dirs();
  absl::Status removed = cgroups_.Remove();
  for (int64_t pause_us = 200; !removed.ok() && pause_us <= 204'800; pause_us *= 2) {
    const int64_t until_ns = MonotonicNowNs() + pause_us * 1000;
    bool v1_left = false;
    for (const std::string& d : cgroup_dirs) {
      if (HasCgroupEvents(d)) {
        (void)WaitCgroupEvent(d, "populated", "0", until_ns);
      } else if (PathExists(d)) {
        v1_left = true;
      }
    }
    const int64_t left_us = (until_ns - MonotonicNowNs()) / 1000;
    if (v1_left && left_us > 0) ::usleep(static_cast<useconds_t>(left_us));
    removed = absl::OkStatus();
    for (const std::string& d : cgroup_dirs) {
      absl::Status s = KillAndRemoveCgroup(d);
      if (!s.ok() && removed.ok()) removed = s;
    }
  }
  note(removed);
  if (!removed.ok()) {
    // The cgroups record stays (the next start's CleanupOrphans removes
    // them), under a tombstone's name so that the id is free.
    (void)state_.RenameTo(absl::StrCat(".dead-", ::getpid(), "-", tombstones++));
    DSEC_LOG(warn, "container: {} left for cleanup", state_.Abandon());
    return first;
  }
  note(state_.Remove());
  return first;
}

}  // namespace dsec::container
