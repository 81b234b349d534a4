// SPDX-License-Identifier: Apache-2.0
#include "bench/crun_peer.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "base/file_io.h"
#include "base/status.h"
#include "base/subprocess.h"

namespace dsec::bench {

namespace {

// Step names reported by the namespace holder child.
constexpr const char* kSteps[] = {"ok", "unshare(CLONE_NEWNS)", "make / private",
                                  "cover /sys/fs/cgroup/unified", "mount erofs", "mount tmpfs",
                                  "mkdir upper/work", "mount overlay"};

// A hybrid host: cgroup v1 hierarchies on a tmpfs at /sys/fs/cgroup plus a
// cgroup2 mount at /sys/fs/cgroup/unified.
bool HybridCgroups() {
  struct statfs root, unified;
  return ::statfs("/sys/fs/cgroup", &root) == 0 && root.f_type == TMPFS_MAGIC &&
         ::statfs("/sys/fs/cgroup/unified", &unified) == 0 &&
         unified.f_type == CGROUP2_SUPER_MAGIC;
}

// Body of the child that makes and then holds the namespace. Only syscalls
// (the process is single-threaded when it forks, but keep it simple). A
// fork running this code, not base/subprocess: nothing is exec'ed, the
// child is the namespace's holder until the parent has opened it.
[[noreturn]] void HoldNamespace(const std::string& image, const std::string& dir, bool hybrid,
                                int report_fd, int wait_fd, ScopedFd& parent_report_r,
                                ScopedFd& parent_hold_w) {
  // The parent's ends: holding the write end of the wait pipe would keep
  // this child from ever seeing EOF.
  parent_report_r.Reset();
  parent_hold_w.Reset();
  auto fail = [report_fd](int32_t step) {
    int32_t msg[2] = {step, errno};
    (void)!::write(report_fd, msg, sizeof(msg));
    ::_exit(1);
  };
  if (::unshare(CLONE_NEWNS) != 0) fail(1);
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail(2);
  if (hybrid && ::mount("tmpfs", "/sys/fs/cgroup/unified", "tmpfs", MS_NODEV | MS_NOSUID, "size=64m") != 0) {
    fail(3);
  }
  const std::string lower = dir + "/lower", upperfs = dir + "/upperfs",
                    rootfs = dir + "/bundle/rootfs";
  if (::mount(image.c_str(), lower.c_str(), "erofs", MS_RDONLY | MS_NODEV | MS_NOSUID, nullptr) !=
      0) {
    fail(4);
  }
  if (::mount("tmpfs", upperfs.c_str(), "tmpfs", MS_NODEV | MS_NOSUID, "size=1g,mode=0755") != 0) {
    fail(5);
  }
  const std::string upper = upperfs + "/upper", work = upperfs + "/work";
  if (::mkdir(upper.c_str(), 0755) != 0 || ::mkdir(work.c_str(), 0755) != 0) fail(6);
  // The same options as the container tier's overlay (Mount::Overlay).
  const std::string data = absl::StrCat("lowerdir=", lower, ",upperdir=", upper, ",workdir=", work,
                                        ",index=off,xino=off");
  if (::mount("overlay", rootfs.c_str(), "overlay", MS_NODEV, data.c_str()) != 0) fail(7);
  int32_t ok[2] = {0, 0};
  (void)!::write(report_fd, ok, sizeof(ok));
  char c;
  (void)!::read(wait_fd, &c, 1);  // EOF: the parent holds the namespace now
  ::_exit(0);
}

}  // namespace

nlohmann::json CrunBundleConfig(const std::string& rootfs, const std::vector<std::string>& argv,
                                uint64_t memory_bytes, uint64_t pids_max) {
  using nlohmann::json;
  // The container tier's capability set (container::SafeCapabilities()).
  const json caps = {"CAP_CHOWN",  "CAP_DAC_OVERRIDE", "CAP_FOWNER",           "CAP_FSETID",
                     "CAP_KILL",   "CAP_SETGID",       "CAP_SETUID",           "CAP_SETPCAP",
                     "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_SETFCAP"};
  json mounts = json::array({
      {{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}},
      {{"destination", "/dev"},
       {"type", "tmpfs"},
       {"source", "tmpfs"},
       {"options", {"nosuid", "strictatime", "mode=755", "size=65536k"}}},
      {{"destination", "/dev/pts"},
       {"type", "devpts"},
       {"source", "devpts"},
       {"options", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}}},
      {{"destination", "/dev/shm"},
       {"type", "tmpfs"},
       {"source", "shm"},
       {"options", {"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}}},
      {{"destination", "/sys"},
       {"type", "sysfs"},
       {"source", "sysfs"},
       {"options", {"nosuid", "noexec", "nodev", "ro"}}},
  });
  json namespaces = json::array();
  for (const char* ns : {"pid", "network", "ipc", "uts", "mount", "cgroup"}) {
    namespaces.push_back({{"type", ns}});
  }
  return {
      {"ociVersion", "1.0.0"},
      {"process",
       {{"terminal", false},
        {"user", {{"uid", 0}, {"gid", 0}}},
        {"args", argv},
        {"env", {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
                 "TERM=dumb"}},
        {"cwd", "/"},
        {"capabilities",
         {{"bounding", caps}, {"effective", caps}, {"permitted", caps}, {"inheritable", json::array()},
          {"ambient", json::array()}}},
        {"rlimits", {{{"type", "RLIMIT_NOFILE"}, {"hard", 1024}, {"soft", 1024}},
                     {{"type", "RLIMIT_CORE"}, {"hard", 0}, {"soft", 0}}}},
        {"noNewPrivileges", true}}},
      {"root", {{"path", rootfs}, {"readonly", false}}},
      {"hostname", "sandbox"},
      {"mounts", mounts},
      {"linux",
       {{"resources",
         {{"devices", {{{"allow", false}, {"access", "rwm"}}}},
          {"memory", {{"limit", memory_bytes}, {"swap", memory_bytes}}},
          {"pids", {{"limit", pids_max}}}}},
        {"namespaces", namespaces},
        {"maskedPaths",
         {"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
          "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
          "/proc/scsi", "/proc/kpagecgroup", "/proc/kpageflags", "/proc/kpagecount"}},
        {"readonlyPaths",
         {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}}}},
  };
}

absl::StatusOr<std::unique_ptr<CrunPeer>> CrunPeer::Create(const std::string& crun,
                                                           const std::string& image,
                                                           const std::string& dir,
                                                           const std::string& state_dir,
                                                           uint64_t memory_bytes,
                                                           uint64_t pids_max) {
  if (::access(crun.c_str(), X_OK) != 0) {
    return absl::UnavailableError(absl::StrCat(crun, " not found (apt-get install crun)"));
  }
  for (const char* sub : {"", "/lower", "/upperfs", "/bundle", "/bundle/rootfs"}) {
    std::string p = dir + sub;
    if (::mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoToStatus("mkdir " + p);
  }
  {
    std::ofstream config(dir + "/bundle/config.json");
    config << CrunBundleConfig(dir + "/bundle/rootfs", {"true"}, memory_bytes, pids_max).dump(1);
    if (!config) return absl::InternalError("writing " + dir + "/bundle/config.json");
  }
  int report[2], hold[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return ErrnoToStatus("pipe2");
  ScopedFd report_r(report[0]), report_w(report[1]);
  if (::pipe2(hold, O_CLOEXEC) != 0) return ErrnoToStatus("pipe2");
  ScopedFd hold_r(hold[0]), hold_w(hold[1]);
  const bool hybrid = HybridCgroups();
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoToStatus("fork");
  if (pid == 0) HoldNamespace(image, dir, hybrid, report_w.get(), hold_r.get(), report_r, hold_w);
  report_w.Reset();
  hold_r.Reset();
  int32_t msg[2] = {-1, 0};
  absl::Status status;
  if (::read(report_r.get(), msg, sizeof(msg)) != sizeof(msg)) {
    status = absl::InternalError("crun namespace holder died");
  } else if (msg[0] != 0) {
    status = ErrnoToStatus(absl::StrCat("crun bundle: ", kSteps[msg[0]]), msg[1]);
  }
  ScopedFd ns;
  if (status.ok()) {
    ns.Reset(::open(absl::StrCat("/proc/", pid, "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC));
    if (!ns) status = ErrnoToStatus("open crun mount namespace");
  }
  hold_w.Reset();
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (!status.ok()) return status;
  return std::unique_ptr<CrunPeer>(new CrunPeer(crun, dir, state_dir, std::move(ns)));
}

absl::StatusOr<double> CrunPeer::Run(const std::string& id) const {
  auto ms = TimedRun({crun_, "--root", state_dir_, "--cgroup-manager=cgroupfs", "run", "--bundle",
                      dir_ + "/bundle", id},
                     mntns_.get(), dir_ + "/crun.err");
  if (!ms.ok()) {
    // Whatever crun left of the container (cgroups, state) goes.
    (void)TimedRun({crun_, "--root", state_dir_, "--cgroup-manager=cgroupfs", "delete", "--force",
                    id},
                   mntns_.get(), dir_ + "/crun-delete.err");
  }
  return ms;
}

absl::StatusOr<double> TimedRun(const std::vector<std::string>& argv, int mntns_fd,
                                const std::string& err_path) {
  SpawnOptions spawn;
  spawn.argv = argv;
  spawn.err = Stdio::File(err_path);
  spawn.mount_ns_fd = mntns_fd;
  // crun needs the fork (setns before exec); whatever it is compared with is
  // started the same way.
  spawn.force_fork = true;
  DSEC_ASSIGN_OR_RETURN(SubprocessResult r, RunSubprocess(spawn));
  if (!r.Succeeded()) {
    auto text = dsec::ReadSmallFile(err_path);
    return absl::InternalError(absl::StrCat(argv[0], " ", argv.size() > 4 ? argv[4] : "",
                                            " failed (status ", r.wait_status, "): ",
                                            text.ok() ? *text : ""));
  }
  return r.WallMs();
}

}  // namespace dsec::bench
