// SPDX-License-Identifier: Apache-2.0
#include "sandbox/microvm/vm_process.h"

#include <elf.h>
#include <linux/capability.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/clock.h"
#include "base/file_io.h"
#include "base/scoped_fd.h"
#include "base/status.h"
#include "devices/balloon/balloon_spec.h"
#include "devices/net/net_spec.h"
#include "devices/vsock/vsock_spec.h"
#include "pmem-dax/pmem_spec.h"
#include "sched/placement.h"
#include "vmm/api/control.h"
#include "vmm/monitor/monitor_options.h"
#include "vmm/snapshot/snapshot_format.h"

namespace dsec::microvm {

namespace {

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return "/";
  return path.substr(0, slash);
}

// Procfs entries a uid-0 process without capabilities could still read or
// write through their owner bits (Docker masks the same).
constexpr const char* kMaskedProc[] = {"kcore",      "keys",       "kpagecount", "kpageflags",
                                       "kpagecgroup", "timer_list", "sched_debug", "sysrq-trigger"};
constexpr const char* kReadOnlyProc[] = {"sys", "bus", "fs", "irq"};

absl::StatusCode CodeFromName(const std::string& name) {
  static const std::pair<const char*, absl::StatusCode> kCodes[] = {
      {"INVALID_ARGUMENT", absl::StatusCode::kInvalidArgument},
      {"FAILED_PRECONDITION", absl::StatusCode::kFailedPrecondition},
      {"NOT_FOUND", absl::StatusCode::kNotFound},
      {"RESOURCE_EXHAUSTED", absl::StatusCode::kResourceExhausted},
      {"UNAVAILABLE", absl::StatusCode::kUnavailable},
      {"PERMISSION_DENIED", absl::StatusCode::kPermissionDenied},
  };
  for (const auto& [n, c] : kCodes) {
    if (name == n) return c;
  }
  return absl::StatusCode::kInternal;
}

// The canonical path of an existing file (or directory), named `what` in
// errors.
absl::StatusOr<std::string> RealPath(const std::string& what, const std::string& path, bool directory) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat("microvm: no ", what, " given"));
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) {
    return ErrnoToStatus(absl::StrCat("microvm: ", what, " ", path));
  }
  struct stat st;
  if (::stat(buf, &st) != 0) return ErrnoToStatus(absl::StrCat("microvm: ", what, " ", path));
  if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("microvm: ", what, " ", path, " is not a ", directory ? "directory" : "file"));
  }
  return std::string(buf);
}

absl::StatusOr<std::string> RealFile(const std::string& what, const std::string& path) {
  return RealPath(what, path, false);
}

absl::StatusOr<std::string> RealDir(const std::string& what, const std::string& path) {
  return RealPath(what, path, true);
}

}  // namespace

std::string LinuxCmdline(size_t layer_count, uint64_t upper_mib, uint32_t agent_port,
                         const std::string& extra) {
  std::string c = "console=ttyS0 root=/dev/pmem0 rootfstype=erofs ro";
  if (layer_count > 0) {
    std::vector<std::string> devs;
    for (size_t i = 1; i <= layer_count; ++i) devs.push_back(absl::StrCat("/dev/pmem", i));
    absl::StrAppend(&c, " dsec.layers=", absl::StrJoin(devs, ","));
  }
  absl::StrAppend(&c, " dsec.upper=tmpfs:", upper_mib, " dsec.port=", agent_port);
  if (!extra.empty()) absl::StrAppend(&c, " ", extra);
  return c;
}

VmFiles VmFilesIn(const std::string& state_dir) {
  VmFiles f;
  f.dir = absl::StrCat(state_dir, "/vm");
  f.vsock_socket = absl::StrCat(f.dir, "/vsock.sock");
  f.control_socket = absl::StrCat(f.dir, "/control.sock");
  f.console = absl::StrCat(f.dir, "/console.log");
  f.stats_json = absl::StrCat(f.dir, "/stats.json");
  f.config = absl::StrCat(f.dir, "/config.json");
  f.log = absl::StrCat(state_dir, "/vmm.log");
  f.jail_root = absl::StrCat(state_dir, "/jail");
  return f;
}

monitor::MonitorOptions VmMonitorOptions(const VmPlan& plan, const VmFiles& files) {
  monitor::MonitorOptions o;
  vm::VmConfig& c = o.config;
  c.kernel_path = plan.kernel;
  c.cmdline = plan.cmdline;
  c.mem_mib = plan.mem_mib;
  c.vcpus = plan.vcpus;
  if (!plan.qos.empty()) {
    if (auto q = sched::ParseQosClass(plan.qos); q.ok()) c.qos = *q;
  }
  c.console.kind = vm::ConsoleConfig::Kind::kFile;
  c.console.path = files.console;
  c.console.cap_bytes = plan.console_cap_bytes;
  // Device order: the pmems first, so that /dev/pmem0 is the root image
  // and /dev/pmem1.. the layers as LinuxCmdline names them.
  for (const std::string& p : plan.pmems) c.devices.push_back(pmem::PmemSpec::Make(p, true));
  if (plan.vsock) c.devices.push_back(devices::VsockSpec::Make(plan.vsock_cid, files.vsock_socket));
  if (plan.balloon) c.devices.push_back(devices::BalloonSpec::Make());
  if (plan.tap_fd >= 0) c.devices.push_back(devices::NetSpec::FromFd(plan.tap_fd, plan.mac));
  c.timeout_ms = plan.timeout_ms;
  o.control = files.control_socket;
  o.stats_json = files.stats_json;
  o.snapshot_dir = plan.snapshot_dir;
  o.restore = plan.restore_dir;
  o.log_level = plan.log_level;
  if (plan.uid) {
    o.jail.uid = *plan.uid;
    o.jail.gid = *plan.uid;
  }
  o.quiet_report = !plan.guest_messages;
  return o;
}

std::vector<std::string> VmArgv(const VmPlan& plan, const VmFiles& files) {
  return {plan.monitor_binary, "--config", files.config};
}

absl::StatusOr<bool> IsDynamicElf(const std::string& path) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoToStatus(absl::StrCat("open ", path));
  Elf64_Ehdr eh;
  if (::pread(fd.get(), &eh, sizeof(eh), 0) != static_cast<ssize_t>(sizeof(eh)) ||
      std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not an ELF64 binary"));
  }
  for (unsigned i = 0; i < eh.e_phnum && i < 512; ++i) {
    Elf64_Phdr ph;
    off_t off = static_cast<off_t>(eh.e_phoff + static_cast<uint64_t>(i) * eh.e_phentsize);
    if (::pread(fd.get(), &ph, sizeof(ph), off) != static_cast<ssize_t>(sizeof(ph))) break;
    if (ph.p_type == PT_INTERP) return true;
  }
  return false;
}

std::vector<MountStep> VmJailSteps(const VmPlan& plan, const VmFiles& files, bool dynamic_binary) {
  const std::string& j = files.jail_root;
  std::vector<MountStep> s;
  auto add = [&s](std::vector<MountStep> more) {
    for (MountStep& m : more) s.push_back(std::move(m));
  };
  // Nothing below propagates back to the host's mount namespace.
  s.push_back(MountStep::Mount("", "/", "", MS_REC | MS_PRIVATE));
  s.push_back(MountStep::Mount("tmpfs", j, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755"));
  s.push_back(MountStep::Mkdir(j + "/dev"));
  for (const char* dev : {"/dev/kvm", "/dev/null"}) {
    s.push_back(MountStep::Touch(j + dev));
    s.push_back(MountStep::Bind(dev, j + dev));
    s.push_back(MountStep::Remount(j + dev, MS_NOSUID | MS_NOEXEC));
  }
  // procfs of the new pid namespace: the monitor reads /proc/self/{status,
  // smaps_rollup,pagemap}.
  s.push_back(MountStep::Mkdir(j + "/proc"));
  s.push_back(MountStep::Mount("proc", j + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC));
  // Entries differ by kernel configuration, not by namespace: the host's
  // /proc tells which exist.
  for (const char* p : kReadOnlyProc) {
    if (!dsec::PathExists(absl::StrCat("/proc/", p))) continue;
    const std::string path = absl::StrCat(j, "/proc/", p);
    s.push_back(MountStep::Bind(path, path, true));
    s.push_back(MountStep::Remount(path, MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC));
  }
  for (const char* p : kMaskedProc) {
    if (!dsec::PathExists(absl::StrCat("/proc/", p))) continue;
    s.push_back(MountStep::Bind("/dev/null", absl::StrCat(j, "/proc/", p)));
  }
  // A fresh sysfs (of the new network namespace), read-only: CPU topology
  // for --qos. With --qos the cgroup tree is bound in read-write, because
  // sched/ makes the vCPUs' cpuset/cpu cgroups below the monitor's own.
  s.push_back(MountStep::Mkdir(j + "/sys"));
  s.push_back(MountStep::Mount("sysfs", j + "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC));
  if (!plan.qos.empty()) s.push_back(MountStep::Bind("/sys/fs/cgroup", j + "/sys/fs/cgroup", true));
  if (dynamic_binary) {
    // A dynamically linked monitor (sanitizer builds): its libraries.
    s.push_back(MountStep::Mkdir(j + "/usr"));
    s.push_back(MountStep::Bind("/usr", j + "/usr", true));
    s.push_back(MountStep::Remount(j + "/usr", MS_RDONLY | MS_NOSUID | MS_NODEV));
    s.push_back(MountStep::Symlink("usr/lib", j + "/lib"));
    s.push_back(MountStep::Symlink("usr/lib64", j + "/lib64"));
  }
  // The binary, kernel and images at their host paths, read-only.
  std::set<std::string> done;
  std::vector<std::string> files_in = {plan.monitor_binary, plan.kernel};
  files_in.insert(files_in.end(), plan.pmems.begin(), plan.pmems.end());
  for (const std::string& f : files_in) {
    if (!done.insert(f).second) continue;
    add(MkdirAllSteps(j, Dirname(f)));
    s.push_back(MountStep::Touch(j + f));
    s.push_back(MountStep::Bind(f, j + f));
    unsigned long flags = MS_RDONLY | MS_NOSUID | MS_NODEV;
    if (f != plan.monitor_binary) flags |= MS_NOEXEC;
    s.push_back(MountStep::Remount(j + f, flags));
  }
  // The monitor's own directory (sockets, console, stats), read-write;
  // the directory it writes snapshots into, read-write; the snapshot it
  // continues from, read-only.
  auto bind_dir = [&](const std::string& dir, unsigned long flags) {
    add(MkdirAllSteps(j, dir));
    s.push_back(MountStep::Bind(dir, j + dir));
    s.push_back(MountStep::Remount(j + dir, flags));
  };
  bind_dir(files.dir, MS_NOSUID | MS_NODEV | MS_NOEXEC);
  if (!plan.snapshot_dir.empty()) bind_dir(plan.snapshot_dir, MS_NOSUID | MS_NODEV | MS_NOEXEC);
  if (!plan.restore_dir.empty()) bind_dir(plan.restore_dir, MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC);
  s.push_back(MountStep::Pivot(j));
  s.push_back(MountStep::Remount("/", MS_RDONLY | MS_NOSUID | MS_NODEV));
  return s;
}

absl::StatusOr<std::unique_ptr<VmProcess>> VmProcess::Start(const VmPlan& plan_in,
                                                            const VmJailOptions& jail) {
  VmPlan plan = plan_in;
  DSEC_ASSIGN_OR_RETURN(plan.monitor_binary, RealFile("monitor binary", plan.monitor_binary));
  DSEC_ASSIGN_OR_RETURN(plan.kernel, RealFile("kernel", plan.kernel));
  for (std::string& p : plan.pmems) {
    DSEC_ASSIGN_OR_RETURN(p, RealFile("pmem image", p));
  }
  if (jail.id.empty() || jail.state_dir.empty()) {
    return absl::InvalidArgumentError("microvm: the jail needs an id and a state directory");
  }
  if (plan.uid && !plan.qos.empty()) {
    return absl::InvalidArgumentError(
        "microvm: a monitor with its own uid cannot place itself (qos needs root)");
  }
  if (plan.uid && *plan.uid == 0) return absl::InvalidArgumentError("microvm: uid 0");
  if (!plan.snapshot_dir.empty()) {
    DSEC_ASSIGN_OR_RETURN(plan.snapshot_dir, RealDir("snapshot directory", plan.snapshot_dir));
    // The monitor opens it as uid 0 without capabilities (group root may
    // read it) and creates its snapshot's files there once it dropped to
    // its uid (the owner, the only one who may write).
    const uint32_t owner = plan.uid.value_or(0);
    if (::chown(plan.snapshot_dir.c_str(), owner, 0) != 0 || ::chmod(plan.snapshot_dir.c_str(), 0750) != 0) {
      return ErrnoToStatus(absl::StrCat("microvm: snapshot directory ", plan.snapshot_dir));
    }
  }
  if (!plan.restore_dir.empty()) {
    DSEC_ASSIGN_OR_RETURN(plan.restore_dir, RealDir("snapshot to restore", plan.restore_dir));
    DSEC_RETURN_IF_ERROR(
        RealFile("snapshot manifest", absl::StrCat(plan.restore_dir, "/", snapshot::kManifestFile)).status());
  }
  VmFiles files = VmFilesIn(jail.state_dir);
  if (::mkdir(files.dir.c_str(), 0700) != 0) return ErrnoToStatus(absl::StrCat("mkdir ", files.dir));
  if (jail.pivot_root && ::mkdir(files.jail_root.c_str(), 0755) != 0) {
    return ErrnoToStatus(absl::StrCat("mkdir ", files.jail_root));
  }
  DSEC_ASSIGN_OR_RETURN(bool dynamic, IsDynamicElf(plan.monitor_binary));

  container::ResourceLimits limits;
  limits.memory_bytes = (plan.mem_mib + jail.overhead_mib) << 20;
  limits.pids_max = jail.pids + plan.vcpus;
  if (jail.cpus > 0) {
    limits.cpu_quota_us = static_cast<int64_t>(jail.cpus * static_cast<double>(limits.cpu_period_us));
  }
  auto record = [&jail](const std::string& dir) {
    return jail.record_cgroup ? jail.record_cgroup(dir) : absl::OkStatus();
  };
  DSEC_ASSIGN_OR_RETURN(container::ContainerCgroups cg,
                        container::ContainerCgroups::Create(absl::StrCat("mvm-", jail.id), limits,
                                                            /*skip_cpu=*/jail.join != nullptr, record));
  auto cgroups = std::make_unique<container::ContainerCgroups>(std::move(cg));

  ScopedFd log(::open(files.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600));
  if (!log) return ErrnoToStatus(absl::StrCat("open ", files.log));
  // The monitor reads its whole configuration from <state>/vm/config.json,
  // inside the directory the jail binds.
  {
    std::ofstream out(files.config, std::ios::trunc);
    out << monitor::MonitorOptionsToJson(VmMonitorOptions(plan, files)).dump(2) << "\n";
    if (!out) return absl::InternalError(absl::StrCat("microvm: cannot write ", files.config));
  }
  JailSpec spec;
  spec.argv = VmArgv(plan, files);
  spec.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"};
  spec.namespaces = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET | CLONE_NEWPID;
  if (jail.pivot_root) {
    spec.steps = VmJailSteps(plan, files, dynamic);
  } else {
    spec.steps.push_back(MountStep::Mount("", "/", "", MS_REC | MS_PRIVATE));
  }
  spec.stdout_fd = log.get();
  spec.stderr_fd = log.get();
  if (plan.tap_fd >= 0) spec.keep_fds.push_back(plan.tap_fd);
  spec.drop_capabilities = true;
  // What the monitor needs to change to its own uid (vmm/jail), no more.
  if (plan.uid) {
    spec.keep_capabilities = (uint64_t{1} << CAP_SETUID) | (uint64_t{1} << CAP_SETGID) |
                             (uint64_t{1} << CAP_SETPCAP);
  }
  spec.cgroups = cgroups.get();
  spec.join = jail.join;
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<JailedProcess> process, JailedProcess::Start(spec));
  return std::unique_ptr<VmProcess>(
      new VmProcess(std::move(files), plan.snapshot_dir, std::move(cgroups), std::move(process)));
}

VmProcess::~VmProcess() { (void)Stop(0); }

absl::StatusOr<nlohmann::json> VmProcess::Control(const nlohmann::json& request,
                                                  int64_t timeout_ms) const {
  DSEC_ASSIGN_OR_RETURN(nlohmann::json answer, api::ControlCall(files_.control_socket, request, timeout_ms));
  if (!answer.is_object()) return absl::InternalError("microvm: control answer is not an object");
  if (!answer.value("ok", false)) {
    std::string code, message = answer.dump();
    if (auto e = answer.find("error"); e != answer.end() && e->is_object()) {
      code = e->value("code", "");
      message = e->value("message", message);
    }
    return absl::Status(CodeFromName(code), absl::StrCat("microvm: control: ", message));
  }
  return answer;
}

absl::Status VmProcess::WaitRunning(int64_t timeout_ms) {
  const int64_t deadline = MonotonicNowMs() + timeout_ms;
  int64_t backoff_ms = 2;
  for (;;) {
    if (Exited()) {
      return absl::UnavailableError(
          absl::StrCat("microvm: the monitor stopped before its control socket answered: ", ExitReport()));
    }
    const int64_t left = deadline - MonotonicNowMs();
    auto stats = Control({{"op", "stats"}}, std::max<int64_t>(1, std::min<int64_t>(left, 1000)));
    if (stats.ok()) return absl::OkStatus();
    if (MonotonicNowMs() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("microvm: control socket did not answer within ",
                                                      timeout_ms, " ms: ", stats.status().message()));
    }
    // Not listening yet: wait on the process (an exit ends the wait at once).
    WaitReadable(exit_fd(), std::min(backoff_ms, std::max<int64_t>(1, deadline - MonotonicNowMs())));
    backoff_ms = std::min<int64_t>(backoff_ms * 2, 50);
  }
}

absl::Status VmProcess::Pause() {
  DSEC_ASSIGN_OR_RETURN(nlohmann::json a, Control({{"op", "pause"}}));
  if (!a.value("paused", false)) return absl::InternalError("microvm: pause not acknowledged");
  return absl::OkStatus();
}

absl::StatusOr<MachineSave> VmProcess::SaveMachine(const std::string& dest_dir, int64_t timeout_ms) {
  if (snapshot_dir_.empty()) {
    return absl::FailedPreconditionError("microvm: this monitor was started without a snapshot directory");
  }
  const std::string tmp_manifest = absl::StrCat(snapshot::kManifestFile, ".tmp");
  const char* const names[] = {snapshot::kMemoryFile, snapshot::kManifestFile, tmp_manifest.c_str()};
  // What a failed snapshot left (the monitor removes its own partial files;
  // this covers a monitor that died writing them).
  auto clear_staging = [&] {
    for (const char* n : names) (void)::unlink(absl::StrCat(snapshot_dir_, "/", n).c_str());
  };
  absl::StatusOr<nlohmann::json> answer = Control({{"op", "snapshot"}}, timeout_ms);
  if (!answer.ok()) {
    clear_staging();
    if (Exited()) return absl::UnavailableError(absl::StrCat("microvm: snapshot: ", ExitReport()));
    return answer.status();
  }
  ScopedFd dest(::open(dest_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dest) {
    clear_staging();
    return ErrnoToStatus(absl::StrCat("microvm: snapshot destination ", dest_dir));
  }
  // Memory first, the manifest last: a directory with a manifest is whole.
  // Root's and read-only from here on: other monitors map it (as uid 0,
  // before they drop to theirs) and none may change it.
  for (const char* n : {snapshot::kMemoryFile, snapshot::kManifestFile}) {
    const std::string from = absl::StrCat(snapshot_dir_, "/", n);
    if (::renameat(AT_FDCWD, from.c_str(), dest.get(), n) != 0 || ::fchownat(dest.get(), n, 0, 0, 0) != 0 ||
        ::fchmodat(dest.get(), n, 0400, 0) != 0) {
      absl::Status err = ErrnoToStatus(absl::StrCat("microvm: moving the snapshot's ", n, " into ", dest_dir));
      clear_staging();
      return err;
    }
  }
  if (::fsync(dest.get()) != 0) return ErrnoToStatus(absl::StrCat("fsync ", dest_dir));
  MachineSave saved;
  saved.memory_bytes = answer->value("memory_bytes", uint64_t{0});
  saved.memory_bytes_written = answer->value("memory_bytes_written", uint64_t{0});
  saved.pause_ms = answer->value("total_ms", 0.0);
  return saved;
}

absl::Status VmProcess::Resume() {
  DSEC_ASSIGN_OR_RETURN(nlohmann::json a, Control({{"op", "resume"}}));
  if (a.value("paused", true)) return absl::InternalError("microvm: resume not acknowledged");
  return absl::OkStatus();
}

std::string VmProcess::ExitReport() {
  std::string out = "the monitor ";
  if (Exited()) {
    auto st = process_->WaitExit(0);
    out += st.ok() ? DescribeWaitStatus(*st) : "has exited";
  } else {
    out += "is still running";
  }
  if (auto stats = dsec::ReadSmallFile(files_.stats_json); stats.ok()) {
    nlohmann::json j = nlohmann::json::parse(*stats, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) {
      absl::StrAppend(&out, "; stop_reason=", j.value("stop_reason", "?"), " detail=\"",
                      j.value("detail", ""), "\"");
    }
  }
  std::string log = FileTail(files_.log, 1500);
  if (!log.empty()) absl::StrAppend(&out, "; log: ", log);
  std::string console = FileTail(files_.console, 1500);
  if (!console.empty()) absl::StrAppend(&out, "; console: ", console);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

absl::Status VmProcess::Stop(int64_t grace_ms) {
  if (stopped_) return absl::OkStatus();
  absl::Status first = process_->Kill(grace_ms > 0 ? SIGTERM : 0, grace_ms);
  // sched/ (--qos) makes cgroups below the monitor's own; a killed monitor
  // leaves them.
  for (const std::string& dir : cgroups_->dirs()) {
    auto children = dsec::ListDirectory(dir);
    if (!children.ok()) continue;
    for (const std::string& c : *children) {
      const std::string path = absl::StrCat(dir, "/", c);
      struct stat st;
      if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        absl::Status s = RemoveCgroupTree(path);
        if (!s.ok() && first.ok()) first = s;
      }
    }
  }
  absl::Status removed = cgroups_->Remove();
  if (!removed.ok() && first.ok()) first = removed;
  stopped_ = true;
  return first;
}

}  // namespace dsec::microvm
