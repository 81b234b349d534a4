// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/init_launch.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "base/fd_passing.h"
#include "base/file_io.h"
#include "base/logging.h"
#include "sandbox/container/init_trampoline.h"
#include "sandbox/container/child_process.h"
#include "base/status.h"

namespace dsec::container {

namespace {

constexpr size_t kStackBytes = 64 << 10;

// One process's launcher of one init binary (init_trampoline.h).
struct Launcher {
  pid_t owner = 0;  // the process that started it, and the parent of its children
  pid_t pid = 0;
  ScopedFd pidfd;
  ScopedFd sock;
};

std::mutex launchers_mu;
// By binary and whether staged (init_trampoline.h).
std::map<std::pair<std::string, bool>, Launcher>* launchers ABSL_GUARDED_BY(launchers_mu) = nullptr;

// Ends `l`: closes our end (the launcher exits on it) and, if this process
// started it, kills and reaps it. A fork's inherited copy is only let go.
void StopLauncher(Launcher& l) {
  l.sock.Reset();
  if (l.pidfd.valid() && l.owner == ::getpid()) {
    ::syscall(SYS_pidfd_send_signal, l.pidfd.get(), SIGKILL, nullptr, 0);
    siginfo_t info{};
    while (::waitid(static_cast<idtype_t>(3) /* P_PIDFD */, static_cast<id_t>(l.pidfd.get()), &info,
                    WEXITED) != 0 &&
           errno == EINTR) {
    }
  }
  l.pidfd.Reset();
  l.pid = 0;
  l.owner = 0;
}

absl::Status StartLauncher(const std::string& binary, bool staged, Launcher& l) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoToStatus("sandbox init launcher: socketpair");
  }
  ScopedFd ours(sv[0]), theirs(sv[1]);
  int rp[2];
  if (::pipe2(rp, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoToStatus("sandbox init launcher: pipe2");
  ScopedFd report_read(rp[0]), report_write(rp[1]);
  int sources[kInitSources] = {theirs.get(), -1, report_write.get(), -1, -1, -1};
  std::vector<char> stack(kStackBytes);
  int pidfd = -1;
  const pid_t pid =
      CloneInitProcess(binary.c_str(), "dsec-sandbox-init", staged ? kStagedLauncherFlag : kLauncherFlag,
                       sources, -1, 0, &pidfd, stack.data(), stack.size());
  if (pid < 0) return ErrnoToStatus("sandbox init launcher: clone", -pid);
  l.owner = ::getpid();
  l.pid = pid;
  l.pidfd.Reset(pidfd);
  // The clone returned once the child exec'd or died trying; a failure is
  // in the pipe by now.
  report_write.Reset();
  ChildError e{};
  if (::read(report_read.get(), &e, sizeof(e)) == static_cast<ssize_t>(sizeof(e))) {
    StopLauncher(l);
    return ErrnoToStatus(absl::StrCat("sandbox init launcher ", binary, ": ", ChildStepName(e.step)),
                         e.err);
  }
  l.sock = std::move(ours);
  return absl::OkStatus();
}

// Asks the launcher of `binary` for a child; starts it first if this
// process has none (or its last one died), and once more if it turns out
// to have died before it read the request.
absl::StatusOr<std::pair<pid_t, ScopedFd>> LaunchThroughLauncher(const std::string& binary,
                                                                 const int sources[kInitSources],
                                                                 uint64_t clone_flags) {
  LauncherRequest req;
  req.clone_flags = clone_flags;
  int fds[kInitSources];
  size_t nfds = 0;
  for (int i = 0; i < kInitSources; ++i) {
    if (sources[i] < 0) continue;
    req.present |= 1u << i;
    fds[nfds++] = sources[i];
  }
  std::lock_guard<std::mutex> lock(launchers_mu);
  if (launchers == nullptr) {
    launchers = new std::map<std::pair<std::string, bool>, Launcher>();  // lives as long as the process
  }
  // Inits in new mount namespaces from the staged launcher; user-namespace
  // ones (which make theirs themselves, from the host's) from the other.
  const bool staged = (clone_flags & CLONE_NEWNS) != 0;
  Launcher& l = (*launchers)[{binary, staged}];
  for (int attempt = 0;; ++attempt) {
    if (l.owner != ::getpid() || !l.sock.valid()) {
      StopLauncher(l);
      DSEC_RETURN_IF_ERROR(StartLauncher(binary, staged, l));
    }
    if (SendWithFds(l.sock.get(), &req, sizeof(req), fds, nfds) == static_cast<ssize_t>(sizeof(req))) break;
    const int send_errno = errno;
    StopLauncher(l);
    if (attempt > 0 || (send_errno != EPIPE && send_errno != ECONNRESET)) {
      return ErrnoToStatus("sandbox init launcher: send", send_errno);
    }
  }
  LauncherReply reply;
  int pidfd = -1;
  size_t got = 0;
  bool dropped = false;
  const ssize_t n = ReceiveWithFds(l.sock.get(), &reply, sizeof(reply), &pidfd, 1, &got, 0, &dropped);
  const int recv_errno = errno;
  ScopedFd child_pidfd(got == 1 ? pidfd : -1);
  if (n != static_cast<ssize_t>(sizeof(reply)) || dropped) {
    StopLauncher(l);
    if (n < 0) return ErrnoToStatus("sandbox init launcher: receive", recv_errno);
    return absl::InternalError("sandbox init launcher: died or answered out of protocol");
  }
  if (reply.pid <= 0) return ErrnoToStatus("clone sandbox init", reply.err);
  if (!child_pidfd.valid()) return absl::InternalError("sandbox init launcher: no pidfd with the answer");
  return std::make_pair(static_cast<pid_t>(reply.pid), std::move(child_pidfd));
}

}  // namespace

pid_t InitLauncherPid(const std::string& binary, bool staged) {
  std::lock_guard<std::mutex> lock(launchers_mu);
  if (launchers == nullptr) return 0;
  auto it = launchers->find({binary, staged});
  if (it == launchers->end() || it->second.owner != ::getpid()) return 0;
  return it->second.pid;
}

namespace {

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

absl::Status ShieldInitFromOom(pid_t init_pid) {
  // Refused once for want of CAP_SYS_RESOURCE, refused always: said once.
  static std::atomic<bool> refused{false};
  if (refused.load(std::memory_order_relaxed)) return absl::OkStatus();
  absl::Status s = WriteSmallFile(absl::StrCat("/proc/", init_pid, "/oom_score_adj"), "-1000");
  if (absl::IsPermissionDenied(s) && !refused.exchange(true)) {
    DSEC_LOG(warn,
             "container: sandbox inits cannot be shielded from their memory cgroup's OOM killer here (no "
             "CAP_SYS_RESOURCE): a sandbox that fills its memory may lose its init, and with it the sandbox");
    return absl::OkStatus();
  }
  return Annotate(s, "the init's OOM score");
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

  const int sources[kInitSources] = {config_read.get(), fds.go_read, fds.report_write,
                                     fds.control,      fds.netns,   fds.userns};
  DSEC_ASSIGN_OR_RETURN(auto child, LaunchThroughLauncher(binary, sources, clone_flags));
  LaunchedInit out;
  out.pid = child.first;
  out.pidfd = std::move(child.second);
  out.config_write = std::move(config_write);
  return out;
}

}  // namespace dsec::container
