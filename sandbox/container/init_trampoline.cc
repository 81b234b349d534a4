// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/init_trampoline.h"

#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "sandbox/container/child_process.h"
#include "sandbox/container/init_protocol.h"
#include "base/fd_passing.h"

namespace dsec::container {

namespace {

struct Trampoline {
  const char* binary = nullptr;
  char* argv[3] = {nullptr, nullptr, nullptr};
  char* envp[1] = {nullptr};
  int sources[kInitSources] = {-1, -1, -1, -1, -1, -1};
  int stage = -1;
  int exec_fd = -1;  // >= 0: execveat of it instead of `binary`
  int devnull = -1;  // >= 0: used instead of opening /dev/null
};

// The child between clone and execve: it shares its parent's memory and
// runs with every signal blocked. Syscalls only, nothing allocated or
// written but its own stack. Its descriptor table is its own.
int RunTrampoline(void* arg) {
  const Trampoline& t = *static_cast<const Trampoline*>(arg);
  // A failure before execve is reported like the init's own (the report
  // pipe is source 2, and in place on kInitReportFd once moved).
  int report = t.sources[2];
  auto fail = [&report](int err) {
    ChildError e{kStdio, err};
    if (report >= 0) (void)!::write(report, &e, sizeof(e));
    ::_exit(127);
  };
  // Everything out of the way of 0-9 first, then into place.
  int moved[kInitSources + 1];
  for (int i = 0; i <= kInitSources; ++i) {
    const int from = i < kInitSources ? t.sources[i] : t.stage;
    moved[i] = from < 0 ? -1 : ::fcntl(from, F_DUPFD_CLOEXEC, 16);
    if (from >= 0 && moved[i] < 0) fail(errno);
  }
  int null = t.devnull >= 0 ? t.devnull : ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) fail(errno);
  int devnull = ::fcntl(null, F_DUPFD_CLOEXEC, 16);
  if (devnull < 0) fail(errno);
  int exec_fd = t.exec_fd < 0 ? -1 : ::fcntl(t.exec_fd, F_DUPFD_CLOEXEC, 16);
  if (t.exec_fd >= 0 && exec_fd < 0) fail(errno);
  report = moved[2];
  for (int fd = 0; fd < 3; ++fd) {
    if (::dup2(devnull, fd) < 0) fail(errno);
  }
  for (int i = 0; i <= kInitSources; ++i) {
    if (::dup2(moved[i] >= 0 ? moved[i] : devnull, kInitConfigFd + i) < 0) fail(errno);
  }
  static_assert(kInitConfigFd + kInitSources == kInitStageFd);
  if (exec_fd >= 0) {
    // Kept (close-on-exec) just above the init's descriptors for execveat.
    if (::dup3(exec_fd, kInitStageFd + 1, O_CLOEXEC) < 0) fail(errno);
    ::syscall(SYS_close_range, kInitStageFd + 2, ~0u, 0);
    ::syscall(SYS_execveat, kInitStageFd + 1, "", t.argv, t.envp, AT_EMPTY_PATH);
  } else {
    ::syscall(SYS_close_range, kInitStageFd + 1, ~0u, 0);
    ::execve(t.binary, t.argv, t.envp);
  }
  ChildError e{kExec, errno};
  if (t.sources[2] >= 0) (void)!::write(kInitReportFd, &e, sizeof(e));
  ::_exit(127);
}

int Popcount(uint32_t v) { return __builtin_popcount(v); }

}  // namespace

pid_t CloneInitProcess(const char* binary, const char* argv0, const char* argv1,
                       const int sources[kInitSources], int stage, uint64_t clone_flags,
                       int* pidfd, char* stack, size_t stack_bytes, int exec_fd, int devnull) {
  Trampoline t;
  t.binary = binary;
  t.argv[0] = const_cast<char*>(argv0);
  t.argv[1] = const_cast<char*>(argv1);
  for (int i = 0; i < kInitSources; ++i) t.sources[i] = sources[i];
  t.stage = stage;
  t.exec_fd = exec_fd;
  t.devnull = devnull;
  // No signal handler of the caller may run in the child, which shares its
  // memory; it inherits the full mask and keeps it through execve.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const int flags = static_cast<int>(clone_flags) | CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD;
  // The stack grows down; keep its top 16-byte aligned.
  char* top = stack + (stack_bytes & ~static_cast<size_t>(15));
  int pid = ::clone(&RunTrampoline, top, flags, &t, pidfd);
  const int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return pid < 0 ? -clone_errno : pid;
}

uint64_t LauncherAllowedCloneFlags() {
  return CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWCGROUP;
}

namespace {

// The launcher's stage: an empty tmpfs, read-only from its creation (its
// superblock too), attached nowhere. -1 where it cannot be made (inits
// then pivot into their root at create, as without a launcher).
int MakeStage() {
  const int fs = static_cast<int>(::syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC));
  if (fs < 0) return -1;
  int mnt = -1;
  if (::syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "size", "4k", 0) == 0 &&
      ::syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "nr_inodes", "1", 0) == 0 &&
      ::syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "mode", "0555", 0) == 0 &&
      ::syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "ro", nullptr, 0) == 0 &&
      ::syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) == 0) {
    mnt = static_cast<int>(::syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                                     MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                         MOUNT_ATTR_NOEXEC));
  }
  ::close(fs);
  return mnt;
}

// The staged launcher's own mount namespace: the stage alone. Returns
// whether it got there; on a failure after leaving the host's namespace
// it goes back to it (`host_ns`), so that an unstaged launcher sees the
// host's mounts as they are.
bool EnterStageOnce(int host_ns) {
  const int stage = MakeStage();
  if (stage < 0) return false;
  bool ok = ::unshare(CLONE_NEWNS) == 0;
  if (!ok) {
    ::close(stage);
    return false;
  }
  ok = ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
       ::syscall(SYS_move_mount, stage, "", AT_FDCWD, "/", MOVE_MOUNT_F_EMPTY_PATH) == 0 &&
       ::fchdir(stage) == 0 && ::syscall(SYS_pivot_root, ".", ".") == 0 &&
       ::umount2(".", MNT_DETACH) == 0 && ::chdir("/") == 0;
  ::close(stage);
  if (!ok) {
    (void)!::setns(host_ns, CLONE_NEWNS);
    (void)!::chdir("/");
  }
  return ok;
}

}  // namespace

int RunInitLauncher(int sock, bool staged) {
  char self[PATH_MAX];
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return 1;
  self[len] = '\0';
  // Rebuilt under a running runtime: the path names the new binary.
  constexpr char kDeleted[] = " (deleted)";
  constexpr ssize_t kDeletedLen = sizeof(kDeleted) - 1;
  if (len > kDeletedLen && __builtin_memcmp(self + len - kDeletedLen, kDeleted, kDeletedLen) == 0) {
    self[len - kDeletedLen] = '\0';
  }
  static char stack[64 << 10];
  static char argv0[] = "dsec-sandbox-init";
  // Staged: what its children need of the host, opened before it leaves
  // the host's tree (its own executable, /dev/null), and the stage's root
  // for them to find on kInitStageFd (a directory: "you are staged").
  int exe = -1, devnull = -1, stage_root = -1;
  if (staged) {
    const int host_ns = ::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    exe = ::open("/proc/self/exe", O_PATH | O_CLOEXEC);
    devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (host_ns >= 0 && exe >= 0 && devnull >= 0 && EnterStageOnce(host_ns)) {
      stage_root = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    }
    if (host_ns >= 0) ::close(host_ns);
    if (stage_root < 0) {
      if (exe >= 0) ::close(exe);
      if (devnull >= 0) ::close(devnull);
      exe = devnull = -1;
    }
  }
  for (;;) {    LauncherRequest req;
    int fds[kMaxPassedFds];
    size_t nfds = 0;
    bool dropped = false;
    const ssize_t n = ReceiveWithFds(sock, &req, sizeof(req), fds, kInitSources, &nfds, 0, &dropped);
    if (n == 0) return 0;
    if (n < 0) return 1;
    LauncherReply reply;
    int pidfd = -1;
    if (static_cast<size_t>(n) != sizeof(req) || dropped || req.magic != kLauncherMagic ||
        (req.present >> kInitSources) != 0 || static_cast<size_t>(Popcount(req.present)) != nfds ||
        (req.clone_flags & ~LauncherAllowedCloneFlags()) != 0) {
      reply.err = EPROTO;
    } else {
      int sources[kInitSources];
      size_t next = 0;
      for (int i = 0; i < kInitSources; ++i) {
        sources[i] = (req.present & (1u << i)) != 0 ? fds[next++] : -1;
      }
      // A child in a new mount namespace copies the launcher's: the stage.
      const bool child_staged = stage_root >= 0 && (req.clone_flags & CLONE_NEWNS) != 0;
      const pid_t pid = CloneInitProcess(self, argv0, nullptr, sources, child_staged ? stage_root : -1,
                                         req.clone_flags | CLONE_PARENT, &pidfd, stack, sizeof(stack),
                                         child_staged ? exe : -1, child_staged ? devnull : -1);
      if (pid > 0) {
        reply.pid = pid;
      } else {
        reply.err = -pid;
        pidfd = -1;
      }
    }
    for (size_t i = 0; i < nfds; ++i) ::close(fds[i]);
    const ssize_t w = SendWithFds(sock, &reply, sizeof(reply), &pidfd, pidfd >= 0 ? 1 : 0);
    if (pidfd >= 0) ::close(pidfd);
    if (w != static_cast<ssize_t>(sizeof(reply))) return 1;
  }
}

}  // namespace dsec::container
