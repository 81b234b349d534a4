// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/exec.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sandbox/container/child_process.h"
#include "sandbox/container/init_protocol.h"
#include "base/output_limiter.h"
#include "base/file_io.h"
#include "base/clock.h"
#include "base/fd_passing.h"
#include "base/logging.h"
#include "base/status.h"

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

namespace {

// One message from the init (blocking: the init writes each in one call).
// `*fd` gets a descriptor that came with it (else -1). False on EOF or an
// error: the init is gone.
bool ReadInitMessage(int control, InitMessage* m, ScopedFd* fd) {
  int got = -1;
  size_t nfds = 0;
  const ssize_t n = ReceiveWithFds(control, m, sizeof(*m), &got, 1, &nfds, MSG_WAITALL);
  fd->Reset(nfds == 1 ? got : -1);
  return n == static_cast<ssize_t>(sizeof(*m));
}

// Sends the request header with the four descriptors, then the body.
bool SendRequest(int control, const ExecRequestHeader& h, const std::string& body,
                 const int (&fds)[kExecRequestFds]) {
  if (SendWithFds(control, &h, sizeof(h), fds, kExecRequestFds) != static_cast<ssize_t>(sizeof(h))) {
    return false;
  }
  for (size_t off = 0; off < body.size();) {
    ssize_t w = ::send(control, body.data() + off, body.size() - off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

// The host pid behind a pidfd ("Pid:" in its fdinfo), or 0.
pid_t PidOfPidfd(int pidfd) {
  auto info = dsec::ReadSmallFile(absl::StrCat("/proc/self/fdinfo/", pidfd));
  if (!info.ok()) return 0;
  for (absl::string_view line : absl::StrSplit(*info, '\n')) {
    if (!absl::ConsumePrefix(&line, "Pid:")) continue;
    int pid = 0;
    return absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &pid) && pid > 0 ? pid : 0;
  }
  return 0;
}

absl::Status InitGone() {
  return absl::FailedPreconditionError("exec: the sandbox's init is gone");
}

}  // namespace

absl::StatusOr<ExecResult> RunExec(const ExecTarget& target, const ExecOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return absl::InvalidArgumentError("exec: empty argv");
  }
  if (target.init_control_fd < 0) return InitGone();
  const Clock& clock = MonotonicClock::Get();
  const int64_t start = clock.NowNs();
  const int64_t deadline = start + std::max<int64_t>(options.timeout_ms, 1) * 1'000'000;

  ExecSpec spec;
  spec.argv = options.argv;
  spec.env = options.env.empty() ? *target.default_env : options.env;
  spec.exec_paths = ExecPaths(options.argv[0], spec.env);
  spec.cwd = options.cwd.empty() ? "/" : options.cwd;
  spec.uid = options.uid;
  spec.gid = options.gid;
  spec.kill_group_on_exit = options.kill_group_on_exit;
  ExecRequestHeader header;
  DSEC_ASSIGN_OR_RETURN(std::string body, EncodeExecRequest(spec, &header));
  DSEC_ASSIGN_OR_RETURN(Pipe in, Pipe::Create());
  DSEC_ASSIGN_OR_RETURN(Pipe out, Pipe::Create());
  DSEC_ASSIGN_OR_RETURN(Pipe err, Pipe::Create());
  DSEC_ASSIGN_OR_RETURN(Pipe error, Pipe::Create());

  target.cgroups->ResetPeak();
  const uint64_t oom_before = target.cgroups->OomKills();
  const int control = target.init_control_fd;
  const int fds[kExecRequestFds] = {in.read.get(), out.write.get(), err.write.get(),
                                    error.write.get()};
  if (!SendRequest(control, header, body, fds)) return InitGone();
  in.read.Reset();
  out.write.Reset();
  err.write.Reset();
  error.write.Reset();

  // The init's answer. Reports of earlier execs that gave up waiting may
  // come first; they carry other pids.
  InitMessage m;
  ScopedFd pidfd;
  while (true) {
    pollfd p{control, POLLIN, 0};
    int64_t left_ms = (deadline - clock.NowNs()) / 1'000'000;
    if (left_ms <= 0) {
      return absl::DeadlineExceededError("exec: the sandbox's init did not start the process");
    }
    int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
    if (ready < 0 && errno != EINTR) return ErrnoToStatus("exec: poll");
    if (ready <= 0) continue;
    if (!ReadInitMessage(control, &m, &pidfd)) return InitGone();
    if (m.type == kInitSpawned || m.type == kInitSpawnFailed) break;
  }
  if (m.type == kInitSpawnFailed) {
    return ErrnoToStatus("exec: the sandbox's init could not start the process", m.value);
  }
  if (!pidfd) return absl::InternalError("exec: the init's answer came without a pidfd");
  const int32_t child = m.pid;  // in the sandbox's pid namespace
  pid_t host_pid = 0;           // looked up when needed (group kills)
  auto host_pgid = [&]() {
    if (host_pid == 0) host_pid = PidOfPidfd(pidfd.get());
    return host_pid;
  };

  ExecResult result;
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
  bool init_lost = false;
  while (true) {
    int64_t now = clock.NowNs();
    bool pipes_open = out.read.valid() || err.read.valid();
    if (exited && !pipes_open) break;
    if (now >= stop_at) {
      if (exited) break;  // drain deadline: strays hold the pipes; stop reading
      if (killed) {
        return absl::InternalError(
            absl::StrCat("exec: process ", child, " was not reaped 5 s after SIGKILL"));
      }
      // Timeout: the process group, then anything else in the sandbox's
      // cgroups but its init (double-forked, setsid'd strays).
      result.timed_out = true;
      killed = true;
      if (pid_t g = host_pgid(); g > 0) ::kill(-g, SIGKILL);
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
    add(exited || init_lost ? -1 : control, POLLIN);
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
      ScopedFd extra;
      if (!ReadInitMessage(control, &m, &extra)) {
        // The init died (the sandbox with it): its processes are gone, so
        // the pipes close and the loop ends; there is no status to report.
        init_lost = true;
        continue;
      }
      if (m.type != kInitExited || m.pid != child) continue;
      exited = true;
      if (WIFEXITED(m.value)) result.exit_code = WEXITSTATUS(m.value);
      if (WIFSIGNALED(m.value)) result.signal = WTERMSIG(m.value);
      result.peak_rss_bytes = m.maxrss_kib * 1024;
      // The init SIGKILLed what the process left in its group; wait until
      // those members are gone, so that the exec returns without them.
      if (m.group_left != 0 && !killed) {
        if (pid_t g = host_pgid(); g > 0) {
          auto left = target.cgroups->KillGroup(g, clock.NowNs() + kKillGraceNs);
          if (!left.ok()) DSEC_LOG(warn, "container: exec group kill: {}", left.status().ToString());
        }
      }
      if (!killed) stop_at = std::min(deadline, clock.NowNs() + kDrainNs);
      if (killed) stop_at = std::min(stop_at, clock.NowNs() + kDrainNs);
    }
    if (init_lost && !out.read.valid() && !err.read.valid()) break;
  }
  result.wall_ns = clock.NowNs() - start;
  result.output_dropped_bytes = limiter.dropped_bytes();
  result.cgroup_peak_bytes = target.cgroups->PeakMemoryBytes();
  result.oom_killed = target.cgroups->OomKills() > oom_before;
  if (have_error) {
    return ErrnoToStatus(absl::StrCat("exec ", options.argv[0], ": ", ChildStepName(exec_error.step)),
                         exec_error.err);
  }
  if (!exited) return InitGone();
  return result;
}

}  // namespace dsec::container
