// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/init_launch.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sandbox/container/child_process.h"
#include "base/status.h"

namespace dsec::container {

namespace {

constexpr size_t kStackBytes = 64 << 10;
constexpr int kSources = 6;  // config, go, report, control, netns, userns

struct Trampoline {
  const char* binary = nullptr;
  char* argv[2] = {nullptr, nullptr};
  char* envp[1] = {nullptr};
  int sources[kSources] = {-1, -1, -1, -1, -1, -1};  // -1: /dev/null in its place
};

// The child between clone and execve: it shares the runtime's memory and
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
  // Everything out of the way of 0-7 first, then into place.
  int moved[kSources];
  for (int i = 0; i < kSources; ++i) {
    moved[i] = t.sources[i] < 0 ? -1 : ::fcntl(t.sources[i], F_DUPFD_CLOEXEC, 16);
    if (t.sources[i] >= 0 && moved[i] < 0) fail(errno);
  }
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) fail(errno);
  int devnull = ::fcntl(null, F_DUPFD_CLOEXEC, 16);
  if (devnull < 0) fail(errno);
  report = moved[2];
  for (int fd = 0; fd < 3; ++fd) {
    if (::dup2(devnull, fd) < 0) fail(errno);
  }
  for (int i = 0; i < kSources; ++i) {
    if (::dup2(moved[i] >= 0 ? moved[i] : devnull, kInitConfigFd + i) < 0) fail(errno);
  }
  ::syscall(SYS_close_range, kInitUsernsFd + 1, ~0u, 0);
  ::execve(t.binary, t.argv, t.envp);
  ChildError e{kExec, errno};
  (void)!::write(kInitReportFd, &e, sizeof(e));
  ::_exit(127);
}

bool Executable(const std::string& path) { return !path.empty() && ::access(path.c_str(), X_OK) == 0; }

}  // namespace

absl::StatusOr<std::string> FindSandboxInit(const std::string& configured) {
  std::vector<std::string> tried;
  auto check = [&tried](const std::string& p) {
    if (Executable(p)) return true;
    tried.push_back(p);
    return false;
  };
  if (!configured.empty()) {
    if (check(configured)) return configured;
    return absl::UnavailableError(
        absl::StrCat("sandbox init binary ", configured, " is not an executable file"));
  }
  if (const char* env = std::getenv("DSEC_SANDBOX_INIT"); env != nullptr && *env != '\0') {
    if (check(env)) return std::string(env);
    return absl::UnavailableError(absl::StrCat("DSEC_SANDBOX_INIT=", env, " is not an executable file"));
  }
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    std::string self(exe, static_cast<size_t>(n));
    std::string next_to = absl::StrCat(self.substr(0, self.rfind('/') + 1), "dsec-sandbox-init");
    if (check(next_to)) return next_to;
  }
#ifdef DSEC_SANDBOX_INIT_PATH
  if (check(DSEC_SANDBOX_INIT_PATH)) return std::string(DSEC_SANDBOX_INIT_PATH);
#endif
  std::string where;
  for (const std::string& t : tried) absl::StrAppend(&where, where.empty() ? "" : ", ", t);
  return absl::UnavailableError(absl::StrCat(
      "no sandbox init binary (dsec-sandbox-init, built with dsec-vmm) at ", where,
      "; set DSEC_SANDBOX_INIT"));
}

absl::Status ValidateInitConfig(const InitConfig& config) {
  if (config.merged.empty() || config.merged.size() > kMaxInitPathBytes ||
      config.hostname.empty() || config.hostname.size() > kMaxInitHostnameBytes ||
      config.seccomp.size() > kMaxInitFilterInsns || config.overlay.size() > kMaxInitOverlayBytes ||
      config.cwd.size() > kMaxInitPathBytes) {
    return absl::InvalidArgumentError(
        "sandbox init: root path, hostname, overlay layers or filter out of bounds");
  }
  if ((config.sys_on_control || config.dev_on_control) && (!config.overlay_on_control || config.join_userns)) {
    return absl::InvalidArgumentError(
        "sandbox init: a sysfs or /dev on the control socket comes with the overlay, without a user namespace");
  }
  if (config.netns_on_control && (!config.overlay_on_control || config.join_netns || config.join_userns)) {
    return absl::InvalidArgumentError(
        "sandbox init: a network namespace on the control socket comes with the overlay, and alone");
  }
  return absl::OkStatus();
}

absl::StatusOr<InitChannels> InitChannels::Create() {
  InitChannels c;
  int go[2], report[2], control[2];
  if (::pipe2(go, O_CLOEXEC) != 0) return ErrnoToStatus("pipe2");
  c.go_read.Reset(go[0]);
  c.go_write.Reset(go[1]);
  if (::pipe2(report, O_CLOEXEC) != 0) return ErrnoToStatus("pipe2");
  c.report_read.Reset(report[0]);
  c.report_write.Reset(report[1]);
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control) != 0) {
    return ErrnoToStatus("socketpair");
  }
  c.control_ours.Reset(control[0]);
  c.control_init.Reset(control[1]);
  return c;
}

InitFds InitChannels::fds() const {
  InitFds f;
  f.go_read = go_read.get();
  f.report_write = report_write.get();
  f.control = control_init.get();
  return f;
}

void InitChannels::CloseInitEnds() {
  go_read.Reset();
  report_write.Reset();
  control_init.Reset();
}

absl::StatusOr<LaunchedInit> LaunchInit(const std::string& binary, const InitConfig* config,
                                        const InitFds& fds, uint64_t clone_flags) {
  if (config != nullptr) DSEC_RETURN_IF_ERROR(ValidateInitConfig(*config));
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoToStatus("sandbox init: pipe2");
  ScopedFd config_read(p[0]), config_write(p[1]);
  // The whole config fits in the pipe's buffer (64 KiB; the bounds above
  // keep it under 58 KiB), so it is written before the child exists.
  if (config != nullptr) {
    const std::string encoded = EncodeInitConfig(*config);
    for (size_t off = 0; off < encoded.size();) {
      ssize_t w = ::write(config_write.get(), encoded.data() + off, encoded.size() - off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return ErrnoToStatus("sandbox init: write config");
      off += static_cast<size_t>(w);
    }
    config_write.Reset();
  }

  Trampoline t;
  t.binary = binary.c_str();
  static char kArgv0[] = "dsec-sandbox-init";
  t.argv[0] = kArgv0;
  t.sources[0] = config_read.get();
  t.sources[1] = fds.go_read;
  t.sources[2] = fds.report_write;
  t.sources[3] = fds.control;
  t.sources[4] = fds.netns;
  t.sources[5] = fds.userns;
  std::vector<char> stack(kStackBytes);
  // No signal handler of ours may run in the child, which shares our
  // memory; it inherits the full mask and keeps it through execve.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  int pidfd = -1;
  const int flags = static_cast<int>(clone_flags) | CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD;
  int pid = ::clone(&RunTrampoline, stack.data() + stack.size(), flags, &t, &pidfd);
  const int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return ErrnoToStatus("clone sandbox init", clone_errno);
  LaunchedInit out;
  out.pid = pid;
  out.pidfd.Reset(pidfd);
  out.config_write = std::move(config_write);
  return out;
}

}  // namespace dsec::container
