// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/child_process.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dsec::container {

namespace {

constexpr const char* kStepNames[kStepCount] = {
    "ready", "wait for runtime", "unshare cgroup namespace", "make mounts private", "mkdir",
    "mount /dev", "mknod", "mount /dev/pts", "mount /dev/shm", "pivot_root", "umount old root",
    "mount /proc", "mask path", "mount /sys", "sethostname", "bring lo up", "no_new_privs",
    "drop capabilities", "seccomp", "setns", "clone exec process", "setsid", "set up stdio",
    "chdir", "setrlimit", "setuid/setgid", "execve", "set up the control channel",
    "forked", "unshare namespaces", "mount the overlay",
    "read its configuration (is dsec-sandbox-init from this build?)",
};

[[noreturn]] void Fail(int fd, int32_t step, int err) {
  ChildError e{step, err};
  (void)!::write(fd, &e, sizeof(e));
  ::_exit(127);
}

// mkdir that tolerates an existing directory.
bool MkdirP(const char* path, mode_t mode) { return ::mkdir(path, mode) == 0 || errno == EEXIST; }

// Drops every capability outside SafeCapabilities() from the bounding,
// ambient, inheritable, permitted and effective sets. 0 or errno.
int DropCapabilities() {
  const uint64_t safe = SafeCapabilities();
  for (int cap = 0; cap < 64; ++cap) {
    if (safe & (1ull << cap)) continue;
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
      if (errno == EINVAL) break;  // past the kernel's last capability
      return errno;
    }
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
    return errno;
  }
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  data[0].effective = data[0].permitted = static_cast<uint32_t>(safe);
  data[1].effective = data[1].permitted = static_cast<uint32_t>(safe >> 32);
  if (::syscall(SYS_capget, &header, nullptr) != 0 && errno != EINVAL) return errno;
  header = {_LINUX_CAPABILITY_VERSION_3, 0};
  if (::syscall(SYS_capset, &header, data) != 0) return errno;
  return 0;
}

// Capabilities must go first (dropping the bounding set needs
// CAP_SETPCAP); an unprivileged uid, if any, is taken after that.
int LockDown(const SeccompProgram* seccomp, uid_t uid, gid_t gid, int32_t* step) {
  *step = kDropCaps;
  if (int err = DropCapabilities(); err != 0) return err;
  if (uid != 0 || gid != 0) {
    *step = kSetId;
    if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 ||
        ::setresuid(uid, uid, uid) != 0) {
      return errno;
    }
  }
  *step = kNoNewPrivs;
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  *step = kSeccomp;
  if (seccomp) return LoadSeccompProgram(*seccomp);
  return 0;
}

void BuildDev(int report, bool bind_nodes, int dev_fd) {
  const unsigned long nosuid_noexec = MS_NOSUID | MS_NOEXEC;
  if (dev_fd >= 0) {
    // A directory of the sandbox's writable tmpfs (its size bounds /dev
    // and /dev/shm too): no file system of its own.
    if (::move_mount(dev_fd, "", AT_FDCWD, "dev", MOVE_MOUNT_F_EMPTY_PATH) != 0) Fail(report, kMountDev, errno);
    ::close(dev_fd);
  } else if (::mount("tmpfs", "dev", "tmpfs", nosuid_noexec, "size=65m,mode=0755") != 0) {
    // One tmpfs for /dev and /dev/shm (64 MiB of it; the nodes take
    // nothing): every file system a sandbox mounts is a superblock, and
    // each is a memory-cgroup-aware shrinker whose state the kernel keeps
    // in every memory cgroup, so that a node's memory grows with sandboxes
    // x superblocks (docs/benchmarks.md, bench density).
    Fail(report, kMountDev, errno);
  }
  struct Node {
    const char* path;
    unsigned major, minor;
  };
  static constexpr Node kNodes[] = {{"dev/null", 1, 3},   {"dev/zero", 1, 5},
                                    {"dev/full", 1, 7},   {"dev/random", 1, 8},
                                    {"dev/urandom", 1, 9}, {"dev/tty", 5, 0}};
  for (const Node& n : kNodes) {
    if (bind_nodes) {
      // The host's node (its path is n.path without the "dev/" prefix
      // under /dev), bound over an empty file: still reachable before
      // pivot_root. A bind keeps the host mount's device access, which a
      // tmpfs made in a user namespace lacks (it is always nodev).
      int fd = ::open(n.path, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
      if (fd < 0) Fail(report, kMknod, errno);
      ::close(fd);
      char host[32] = "/";
      std::strncat(host, n.path, sizeof(host) - 2);
      if (::mount(host, n.path, nullptr, MS_BIND, nullptr) != 0) Fail(report, kMknod, errno);
      continue;
    }
    if (::mknod(n.path, S_IFCHR | 0666, makedev(n.major, n.minor)) != 0) Fail(report, kMknod, errno);
    ::chmod(n.path, 0666);  // mknod's mode is subject to the umask
  }
  if (!MkdirP("dev/pts", 0755) || !MkdirP("dev/shm", 01777) || ::chmod("dev/shm", 01777) != 0) {
    Fail(report, kMkdir, errno);
  }
  if (::mount("devpts", "dev/pts", "devpts", nosuid_noexec,
              "newinstance,ptmxmode=0666,mode=0620") != 0) {
    Fail(report, kMountDevpts, errno);
  }
  (void)::symlink("pts/ptmx", "dev/ptmx");
  (void)::symlink("/proc/self/fd", "dev/fd");
  (void)::symlink("/proc/self/fd/0", "dev/stdin");
  (void)::symlink("/proc/self/fd/1", "dev/stdout");
  (void)::symlink("/proc/self/fd/2", "dev/stderr");
}

// Before pivot_root, relative to the new root: in a user namespace the
// kernel lets proc and sysfs be mounted only while a fully visible
// instance of each is still in the mount namespace (the host's, until the
// old root is detached).
void MountProcAndSys(int report, int sys_fd) {
  const unsigned long safe = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  if (::mount("proc", "proc", "proc", safe, nullptr) != 0) Fail(report, kMountProc, errno);
  if (sys_fd >= 0) {
    if (::move_mount(sys_fd, "", AT_FDCWD, "sys", MOVE_MOUNT_F_EMPTY_PATH) != 0) Fail(report, kMountSys, errno);
    ::close(sys_fd);
    return;
  }
  if (::mount("sysfs", "sys", "sysfs", safe | MS_RDONLY, nullptr) != 0) {
    Fail(report, kMountSys, errno);
  }
}

// After pivot_root.
void MaskProcAndSys(int report) {
  const unsigned long safe = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  // Kernel-internal files a sandbox must not read or poke: /dev/null over
  // each (those the kernel lacks are skipped).
  static constexpr const char* kMaskedFiles[] = {
      "/proc/kpagecgroup", "/proc/kpageflags",  "/proc/kpagecount", "/proc/kcore",
      "/proc/sysrq-trigger", "/proc/timer_list", "/proc/keys",     "/proc/latency_stats",
      "/proc/sched_debug",  "/proc/config.gz",  "/proc/kmsg",     "/proc/kallsyms",
      "/proc/vmallocinfo",  "/proc/pagetypeinfo", "/proc/slabinfo"};
  for (const char* path : kMaskedFiles) {
    if (::access(path, F_OK) != 0) continue;
    if (::mount("/dev/null", path, nullptr, MS_BIND, nullptr) != 0) Fail(report, kMaskPath, errno);
  }
  // Whole directories: an empty directory of /dev's tmpfs bound read-only
  // over each, then removed (it stays empty: nothing can be made in a
  // removed directory), so no file system of their own (see BuildDev);
  // where /dev is read-only already (fncall's workers, few), an empty
  // read-only tmpfs over each.
  constexpr char kEmpty[] = "/dev/.dsec-mask";
  const bool bind = ::mkdir(kEmpty, 0555) == 0;
  if (!bind && errno != EROFS) Fail(report, kMaskPath, errno);
  static constexpr const char* kMaskedDirs[] = {"/proc/acpi", "/proc/scsi", "/proc/asound", "/sys/firmware"};
  for (const char* path : kMaskedDirs) {
    if (::access(path, F_OK) != 0) continue;
    const bool masked =
        bind ? ::mount(kEmpty, path, nullptr, MS_BIND, nullptr) == 0 &&
                   ::mount(nullptr, path, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | safe, nullptr) == 0
             : ::mount("tmpfs", path, "tmpfs", safe | MS_RDONLY, "size=0") == 0;
    if (!masked) Fail(report, kMaskPath, errno);
  }
  if (bind && ::rmdir(kEmpty) != 0) Fail(report, kMaskPath, errno);
  static constexpr const char* kReadOnly[] = {"/proc/sys", "/proc/irq", "/proc/bus",
                                              "/proc/fs", "/proc/sysvipc"};
  for (const char* path : kReadOnly) {
    if (::access(path, F_OK) != 0) continue;
    if (::mount(path, path, nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
        ::mount(nullptr, path, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | safe, nullptr) != 0) {
      Fail(report, kMaskPath, errno);
    }
  }
}

void LoopbackUp(int report) {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) Fail(report, kLoopbackUp, errno);
  ifreq req{};
  std::memcpy(req.ifr_name, "lo", 3);
  if (::ioctl(s, SIOCGIFFLAGS, &req) != 0) Fail(report, kLoopbackUp, errno);
  req.ifr_flags = static_cast<short>(req.ifr_flags | IFF_UP);
  if (::ioctl(s, SIOCSIFFLAGS, &req) != 0) Fail(report, kLoopbackUp, errno);
  ::close(s);
}

}  // namespace

const char* ChildStepName(int32_t step) {
  if (step < 0 || step >= kStepCount) return "unknown step";
  return kStepNames[step];
}

uint64_t SafeCapabilities() {
  constexpr int kCaps[] = {CAP_CHOWN,  CAP_DAC_OVERRIDE, CAP_FOWNER,           CAP_FSETID,
                           CAP_KILL,   CAP_SETGID,       CAP_SETUID,           CAP_SETPCAP,
                           CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT, CAP_SETFCAP};
  uint64_t mask = 0;
  for (int c : kCaps) mask |= 1ull << c;
  return mask;
}

void FailChild(int fd, int32_t step, int err) { Fail(fd, step, err); }

// Here rather than in seccomp_policy.cc: the sandbox init binary links
// this file, not libseccomp.
int LoadSeccompProgram(const SeccompProgram& program) {
  sock_fprog prog = program.prog();
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) return errno;
  return 0;
}

int LockDownProcess(const SeccompProgram* seccomp, uid_t uid, gid_t gid, int32_t* step) {
  return LockDown(seccomp, uid, gid, step);
}

bool InStage(int stage_fd) {
  struct stat st{};
  const bool staged = ::fstat(stage_fd, &st) == 0 && S_ISDIR(st.st_mode);
  ::close(stage_fd);
  return staged;
}

void BuildSandboxRoot(const RootPlan& plan) {
  const int report = plan.report_fd;
  if (::unshare(CLONE_NEWCGROUP) != 0) Fail(report, kUnshareCgroup, errno);
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    Fail(report, kMakePrivate, errno);
  }
  if (!plan.overlay_data.empty() &&
      ::mount("overlay", plan.merged.c_str(), "overlay", MS_NODEV, plan.overlay_data.c_str()) != 0) {
    Fail(report, kMountOverlay, errno);
  }
  if (plan.staged) {
    // Over the stage's root, and into it (its descriptor names the mount).
    if (plan.overlay_fd < 0) Fail(report, kMountOverlay, EINVAL);
    if (::move_mount(plan.overlay_fd, "", AT_FDCWD, "/", MOVE_MOUNT_F_EMPTY_PATH) != 0 ||
        ::fchdir(plan.overlay_fd) != 0) {
      Fail(report, kMountOverlay, errno);
    }
    ::close(plan.overlay_fd);
  } else {
    if (plan.overlay_fd >= 0) {
      if (::move_mount(plan.overlay_fd, "", AT_FDCWD, plan.merged.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
        Fail(report, kMountOverlay, errno);
      }
      ::close(plan.overlay_fd);
    }
    if (::chdir(plan.merged.c_str()) != 0) Fail(report, kPivotRoot, errno);
  }
  if (plan.make_mount_points) {
    for (const char* dir : {"proc", "sys", "dev", "tmp"}) {
      if (!MkdirP(dir, 0755)) Fail(report, kMkdir, errno);
    }
    ::chmod("tmp", 01777);
  }
  BuildDev(report, plan.bind_dev_nodes, plan.dev_fd);
  for (const auto& [source, target] : plan.binds) {
    // Relative to the new root: strip leading slashes.
    const char* rel = target.c_str();
    while (*rel == '/') ++rel;
    if (::mount(source.c_str(), rel, nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
        ::mount(nullptr, rel, nullptr, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV, nullptr) != 0) {
      Fail(report, kMaskPath, errno);
    }
  }
  if (plan.read_only_dev &&
      ::mount(nullptr, "dev", nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
              nullptr) != 0) {
    Fail(report, kMountDev, errno);
  }
  MountProcAndSys(report, plan.sys_fd);
  if (plan.staged) {
    // The namespace's root is the stage, under this one: a chroot is the
    // whole switch (no visit of every task, as pivot_root's).
    if (::chroot(".") != 0) Fail(report, kPivotRoot, errno);
  } else {
    if (::syscall(SYS_pivot_root, ".", ".") != 0) Fail(report, kPivotRoot, errno);
    if (::umount2(".", MNT_DETACH) != 0) Fail(report, kUmountOld, errno);
  }
  if (::chdir("/") != 0) Fail(report, kPivotRoot, errno);
  MaskProcAndSys(report);
  if (::sethostname(plan.hostname.data(), plan.hostname.size()) != 0) {
    Fail(report, kHostname, errno);
  }
  LoopbackUp(report);
}

}  // namespace dsec::container
