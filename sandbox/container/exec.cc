// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/exec.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sandbox/container/child_process.h"
#include "sandbox/container/exec_helper.h"
#include "sandbox/container/output_limiter.h"
#include "sched/isolation.h"
#include "vmm/base/clock.h"
#include "vmm/base/logging.h"
#include "vmm/base/status.h"

namespace dsec::container {

namespace {

constexpr char kDefaultPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
// After the main process exits, its output is drained for at most this
// long: a background process that keeps the pipes open must not hold the
// exec (it is a deadline on poll, not a sleep).
constexpr int64_t kDrainNs = 200'000'000;
// After a timeout kill, how long the exec waits for the process to go.
constexpr int64_t kKillGraceNs = 5'000'000'000;

struct Pipe {
  ScopedFd read, write;
  static absl::StatusOr<Pipe> Create() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoToStatus("pipe2");
    return Pipe{ScopedFd(fds[0]), ScopedFd(fds[1])};
  }
};

std::vector<std::string> ExecPaths(const std::string& argv0, const std::vector<std::string>& env) {
  if (argv0.find('/') != std::string::npos) return {argv0};
  std::string path = kDefaultPath;
  for (const std::string& e : env) {
    if (absl::StartsWith(e, "PATH=")) path = e.substr(5);
  }
  std::vector<std::string> out;
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    out.push_back(absl::StrCat(dir, "/", argv0));
  }
  return out;
}

// Reads all the fd has now (non-blocking) into the limiter, counting what
// it drops in *dropped and handing what it admits to `on_output` (stream 1
// or 2). False on EOF.
bool Drain(int fd, int stream, OutputLimiter& limiter, std::string* out, uint64_t* dropped,
           const OutputCallback& on_output) {
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      const size_t kept_before = out->size();
      const uint64_t dropped_before = limiter.dropped_bytes();
      limiter.Admit(std::string_view(buf, static_cast<size_t>(n)), out);
      *dropped += limiter.dropped_bytes() - dropped_before;
      if (on_output && out->size() > kept_before) {
        on_output(stream, std::string_view(*out).substr(kept_before));
      }
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN;  // EAGAIN: open but empty; other errors: treat as closed
  }
}

}  // namespace

ssize_t WriteNoSigpipe(int fd, const char* data, size_t len) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  ssize_t n = ::write(fd, data, len);
  int err = errno;
  if (n < 0 && err == EPIPE) {
    timespec zero{0, 0};
    sigtimedwait(&pipe_set, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = err;
  return n;
}

absl::StatusOr<ExecResult> RunExec(const ExecTarget& target, const ExecOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return absl::InvalidArgumentError("exec: empty argv");
  }
  const Clock& clock = MonotonicClock::Get();
  const int64_t start = clock.NowNs();
  const int64_t deadline = start + std::max<int64_t>(options.timeout_ms, 1) * 1'000'000;

  ExecPlan plan;
  for (const ScopedFd& fd : *target.ns_fds) plan.ns_fds.push_back(fd.get());
  plan.argv = options.argv;
  plan.env = options.env.empty() ? *target.default_env : options.env;
  plan.exec_paths = ExecPaths(options.argv[0], plan.env);
  plan.cwd = options.cwd.empty() ? "/" : options.cwd;
  plan.uid = options.uid;
  plan.gid = options.gid;
  plan.nofile = target.nofile;
  plan.seccomp = target.seccomp;
  DSEC_ASSIGN_OR_RETURN(Pipe in, Pipe::Create());
  DSEC_ASSIGN_OR_RETURN(Pipe out, Pipe::Create());
  DSEC_ASSIGN_OR_RETURN(Pipe err, Pipe::Create());
  DSEC_ASSIGN_OR_RETURN(Pipe pid_pipe, Pipe::Create());
  DSEC_ASSIGN_OR_RETURN(Pipe go, Pipe::Create());
  DSEC_ASSIGN_OR_RETURN(Pipe error, Pipe::Create());
  plan.stdin_fd = in.read.get();
  plan.stdout_fd = out.write.get();
  plan.stderr_fd = err.write.get();
  plan.pid_report_fd = pid_pipe.write.get();
  plan.go_fd = go.read.get();
  plan.error_fd = error.write.get();
  plan.Finalize();

  target.cgroups->ResetPeak();
  const uint64_t oom_before = target.cgroups->OomKills();

  int32_t child = 0;
  // The helper's process is born in the cgroups: no migration, no go byte.
  bool via_helper = false;
  if (target.helper != nullptr && target.helper->running()) {
    auto spawned = target.helper->Spawn(plan);
    if (spawned.ok()) {
      child = *spawned;
      via_helper = true;
    } else if (!absl::IsUnavailable(spawned.status())) {
      return spawned.status();
    }
  }
  pid_t launcher = 0;
  if (!via_helper) {
    launcher = ::fork();
    if (launcher < 0) return ErrnoToStatus("fork");
    if (launcher == 0) RunExecLauncher(plan);
  }
  in.read.Reset();
  out.write.Reset();
  err.write.Reset();
  pid_pipe.write.Reset();
  go.read.Reset();
  error.write.Reset();

  if (!via_helper) {
    ssize_t got;
    do {
      got = ::read(pid_pipe.read.get(), &child, sizeof(child));
    } while (got < 0 && errno == EINTR);
    int launcher_status = 0;
    while (::waitpid(launcher, &launcher_status, 0) < 0 && errno == EINTR) {
    }
    if (got != sizeof(child) || child <= 0) {
      ChildError e;
      if (::read(error.read.get(), &e, sizeof(e)) == sizeof(e)) {
        return ErrnoToStatus(absl::StrCat("exec: ", ChildStepName(e.step)), e.err);
      }
      return absl::InternalError("exec: launcher died without reporting");
    }
  }
  ScopedFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, child, 0)));
  if (!pidfd) return ErrnoToStatus("pidfd_open exec process");
  ExecResult result;
  // Until the process is waited for, every error path must kill and reap it.
  auto reap = [&](int options_flags) -> bool {
    int status = 0;
    rusage usage{};
    pid_t r = ::wait4(child, &status, options_flags, &usage);
    if (r != child) return false;
    if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
    result.peak_rss_bytes = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
    return true;
  };
  absl::Status joined = via_helper ? absl::OkStatus() : target.cgroups->AddProcess(child);
  if (joined.ok() && target.isolation && !via_helper) {
    joined = target.isolation->AddProcess(child);
  }
  if (!joined.ok()) {
    ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
    reap(0);
    return Annotate(joined, "exec: joining the sandbox cgroups");
  }
  char one = 1;
  if (!via_helper && ::write(go.write.get(), &one, 1) != 1) {
    ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
    reap(0);
    return ErrnoToStatus("exec: starting the process");
  }
  go.write.Reset();

  for (ScopedFd* fd : {&out.read, &err.read, &in.write, &error.read}) {
    ::fcntl(fd->get(), F_SETFL, O_NONBLOCK);
  }
  size_t stdin_off = 0;
  if (options.stdin_data.empty()) in.write.Reset();
  OutputLimiter limiter(options.output_cap_bytes, options.output_rate_bytes_per_s, &clock);
  ChildError exec_error{};
  bool have_error = false;
  bool exited = false;
  int64_t stop_at = deadline;  // moves to the drain or kill deadline
  bool killed = false;
  while (true) {
    int64_t now = clock.NowNs();
    bool pipes_open = out.read.valid() || err.read.valid();
    if (exited && !pipes_open) break;
    if (now >= stop_at) {
      if (exited) break;  // drain deadline: strays hold the pipes; stop reading
      if (killed) {
        return absl::InternalError(
            absl::StrCat("exec: process ", child, " survived SIGKILL for 5 s"));
      }
      // Timeout: the process group, then anything else in the sandbox's
      // cgroups but its init (double-forked, setsid'd strays).
      result.timed_out = true;
      killed = true;
      ::kill(-child, SIGKILL);
      ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
      auto strays = target.cgroups->KillAll(target.init_pid, now + kKillGraceNs);
      if (strays.ok()) {
        result.stray_processes_killed = *strays;
      } else {
        DSEC_LOG(warn, "container: exec kill: {}", strays.status().ToString());
      }
      stop_at = clock.NowNs() + kKillGraceNs;
      continue;
    }
    pollfd fds[5];
    int n = 0;
    auto add = [&](int fd, short events) { fds[n++] = pollfd{fd, events, 0}; };
    add(out.read.get(), POLLIN);
    add(err.read.get(), POLLIN);
    add(error.read.get(), POLLIN);
    add(in.write.get(), POLLOUT);
    add(exited ? -1 : pidfd.get(), POLLIN);
    int64_t wait_ms = (stop_at - now + 999'999) / 1'000'000;
    int ready = ::poll(fds, static_cast<nfds_t>(n), static_cast<int>(std::min<int64_t>(wait_ms, 1000)));
    if (ready < 0 && errno != EINTR) return ErrnoToStatus("exec: poll");
    if (ready <= 0) continue;
    if (fds[0].revents && !Drain(out.read.get(), 1, limiter, &result.stdout_data,
                                 &result.stdout_dropped, options.on_output)) {
      out.read.Reset();
    }
    if (fds[1].revents && !Drain(err.read.get(), 2, limiter, &result.stderr_data,
                                 &result.stderr_dropped, options.on_output)) {
      err.read.Reset();
    }
    if (fds[2].revents) {
      if (::read(error.read.get(), &exec_error, sizeof(exec_error)) == sizeof(exec_error)) {
        have_error = true;
      }
      error.read.Reset();
    }
    if (fds[3].revents) {
      ssize_t w = WriteNoSigpipe(in.write.get(), options.stdin_data.data() + stdin_off,
                                 options.stdin_data.size() - stdin_off);
      if (w > 0) stdin_off += static_cast<size_t>(w);
      if ((w < 0 && errno != EAGAIN) || stdin_off == options.stdin_data.size()) in.write.Reset();
    }
    if (fds[4].revents && !exited) {
      // The zombie still holds its pid, so its group id cannot be reused
      // before the group is killed.
      if (options.kill_group_on_exit && !killed) {
        auto left = target.cgroups->KillGroup(child, clock.NowNs() + kKillGraceNs);
        if (!left.ok()) DSEC_LOG(warn, "container: exec group kill: {}", left.status().ToString());
      }
      exited = reap(WNOHANG);
      if (exited && !killed) stop_at = std::min(deadline, clock.NowNs() + kDrainNs);
      if (exited && killed) stop_at = std::min(stop_at, clock.NowNs() + kDrainNs);
    }
  }
  result.wall_ns = clock.NowNs() - start;
  result.output_dropped_bytes = limiter.dropped_bytes();
  result.cgroup_peak_bytes = target.cgroups->PeakMemoryBytes();
  result.oom_killed = target.cgroups->OomKills() > oom_before;
  if (have_error) {
    return ErrnoToStatus(absl::StrCat("exec ", options.argv[0], ": ", ChildStepName(exec_error.step)),
                         exec_error.err);
  }
  return result;
}

}  // namespace dsec::container
