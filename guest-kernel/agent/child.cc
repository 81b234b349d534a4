// SPDX-License-Identifier: Apache-2.0
#include "guest-kernel/agent/child.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::agent {

namespace internal {

PreparedSpawn::PreparedSpawn(const SpawnSpec& spec) : spec_(spec) {
  const std::string& prog = spec.argv.at(0);
  if (prog.find('/') != std::string::npos) {
    candidates_.push_back(prog);
  } else {
    for (absl::string_view dir : absl::StrSplit(spec.search_path, ':')) {
      candidates_.push_back(absl::StrCat(dir.empty() ? "." : dir, "/", prog));
    }
  }
  for (const std::string& a : spec.argv) argv_.push_back(const_cast<char*>(a.c_str()));
  argv_.push_back(nullptr);
  for (const std::string& e : spec.env) envp_.push_back(const_cast<char*>(e.c_str()));
  envp_.push_back(nullptr);
}

void PreparedSpawn::ExecInChild(int err_fd) const {
  // Async-signal-safe calls only: the parent may have other threads.
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  int err = 0;
  if (spec_.new_session && setsid() < 0) err = errno;
  const int fds[3] = {spec_.stdin_fd, spec_.stdout_fd, spec_.stderr_fd};
  for (int target = 0; target < 3 && err == 0; ++target) {
    int src = fds[target];
    if (src < 0) continue;
    if (src == target) {
      // dup2 would be a no-op and leave close-on-exec set.
      if (fcntl(target, F_SETFD, 0) < 0) err = errno;
    } else if (dup2(src, target) < 0) {
      err = errno;
    }
  }
  // Nothing but 0-2 crosses exec: most descriptors are close-on-exec
  // already; this covers any that a library opened without it. (Marking,
  // not closing, keeps err_fd usable until exec.)
  if (err == 0) syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
  if (err == 0 && !spec_.cwd.empty() && chdir(spec_.cwd.c_str()) < 0) err = errno;
  if (err == 0) {
    err = ENOENT;
    for (const std::string& path : candidates_) {
      execve(path.c_str(), argv_.data(), envp_.data());
      // Like execvp: remember a more telling error than "not found".
      if (errno != ENOENT && errno != ENOTDIR) err = errno;
    }
  }
  ssize_t ignored = write(err_fd, &err, sizeof(err));
  (void)ignored;
  _exit(127);
}

int ReadExecError(int err_read_fd) {
  int err = 0;
  for (;;) {
    ssize_t n = read(err_read_fd, &err, sizeof(err));
    if (n < 0 && errno == EINTR) continue;
    if (n == static_cast<ssize_t>(sizeof(err))) return err == 0 ? EIO : err;
    return 0;  // EOF: exec succeeded
  }
}

ChildStatus StatusFromWait(int wait_status, long maxrss_kib) {
  ChildStatus s;
  if (WIFEXITED(wait_status)) s.exit_code = WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) s.signal = WTERMSIG(wait_status);
  s.maxrss_kib = maxrss_kib;
  return s;
}

}  // namespace internal

namespace {

class PidfdChild : public Child {
 public:
  PidfdChild(pid_t pid, ScopedFd pidfd) : pid_(pid), pidfd_(std::move(pidfd)) {}
  ~PidfdChild() override {
    if (!reaped_) {
      // Never leave a zombie behind: an abandoned child is killed and reaped.
      syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
      (void)Wait(0);
    }
  }

  pid_t pid() const override { return pid_; }
  int wait_fd() const override { return pidfd_.get(); }
  bool Unreaped() const override { return !reaped_; }

  absl::StatusOr<std::optional<ChildStatus>> TryCollect() override {
    if (reaped_) return absl::FailedPreconditionError("child already collected");
    return Wait(WNOHANG);
  }

 private:
  absl::StatusOr<std::optional<ChildStatus>> Wait(int flags) {
    siginfo_t info = {};
    rusage ru = {};
    for (;;) {
      // The raw syscall: glibc's waitid() has no rusage argument.
      long rc = syscall(SYS_waitid, P_PIDFD, pidfd_.get(), &info, WEXITED | flags, &ru);
      if (rc == 0) break;
      if (errno == EINTR) continue;
      reaped_ = true;  // ECHILD: someone else reaped it (SIGCHLD ignored?)
      return ErrnoStatus("waitid");
    }
    if (info.si_pid == 0) return std::nullopt;
    reaped_ = true;
    ChildStatus s;
    if (info.si_code == CLD_EXITED) {
      s.exit_code = info.si_status;
    } else {
      s.signal = info.si_status;
    }
    s.maxrss_kib = ru.ru_maxrss;
    return s;
  }

  const pid_t pid_;
  ScopedFd pidfd_;
  bool reaped_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Child>> PidfdLauncher::Spawn(const SpawnSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("spawn: empty argv");
  internal::PreparedSpawn prepared(spec);
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) != 0) return ErrnoToStatus("pipe2");
  ScopedFd err_read(errpipe[0]);
  ScopedFd err_write(errpipe[1]);
  pid_t pid = fork();
  if (pid < 0) return ErrnoToStatus("fork");
  if (pid == 0) prepared.ExecInChild(err_write.get());
  err_write.Reset();
  long pidfd = syscall(SYS_pidfd_open, pid, 0);
  int open_errno = errno;
  int exec_err = internal::ReadExecError(err_read.get());
  if (pidfd < 0) {
    kill(pid, SIGKILL);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return ErrnoToStatus("pidfd_open", open_errno);
  }
  auto child = std::make_unique<PidfdChild>(pid, ScopedFd(static_cast<int>(pidfd)));
  if (exec_err != 0) {
    // The child _exits right after reporting; the handle's destructor reaps.
    return ErrnoToStatus(absl::StrCat("exec ", spec.argv[0]), exec_err);
  }
  return child;
}

}  // namespace dsec::agent
