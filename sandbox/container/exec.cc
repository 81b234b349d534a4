// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/exec.h"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sandbox/container/child_process.h"
#include "sandbox/container/init_protocol.h"
#include "base/exec_pump.h"
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
// After a timeout kill, how long the exec waits for the process to go (and
// reads the pipes at most).
constexpr int64_t kKillGraceNs = 5'000'000'000;

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
  const Clock& clock = target.clock != nullptr ? *target.clock : MonotonicClock::Get();
  const int64_t start = clock.NowNs();
  const int64_t deadline = start + std::max<int64_t>(options.timeout_ms, 1) * 1'000'000;

  // Counted from here to the end, so that a timeout's kill knows whether
  // another exec of the sandbox runs (its strays may be that one's).
  ExecShared local;
  ExecShared& shared = target.shared != nullptr ? *target.shared : local;
  if (shared.running.fetch_add(1) >= kMaxConcurrentExecs) {
    shared.running.fetch_sub(1);
    return absl::ResourceExhaustedError(
        absl::StrCat("exec: the sandbox runs its maximum of ", kMaxConcurrentExecs, " commands at once"));
  }
  struct Running {
    std::atomic<int>* n;
    ~Running() { n->fetch_sub(1); }
  } running{&shared.running};

  ExecSpec spec;
  spec.argv = options.argv;
  spec.env = options.env.empty() ? *target.default_env : options.env;
  spec.exec_paths = ExecPaths(options.argv[0], spec.env);
  spec.cwd = options.cwd.empty() ? "/" : options.cwd;
  spec.uid = options.uid;
  spec.gid = options.gid;
  spec.kill_group_on_exit = options.kill_group_on_exit;
  spec.copy_stdin_to_stdout = options.copy_to_fd >= 0;
  ExecRequestHeader header;
  DSEC_ASSIGN_OR_RETURN(std::string body, EncodeExecRequest(spec, &header));
  DSEC_ASSIGN_OR_RETURN(Pipe in, Pipe::Create());
  DSEC_ASSIGN_OR_RETURN(Pipe out, Pipe::Create());
  DSEC_ASSIGN_OR_RETURN(Pipe err, Pipe::Create());
  DSEC_ASSIGN_OR_RETURN(Pipe error, Pipe::Create());
  DSEC_ASSIGN_OR_RETURN(Pipe report, Pipe::Create());

  // A copy's data is a memory file it reads to its end at its own pace
  // (through a pipe, each page would be one more round of the pump's poll).
  ScopedFd copy_in;
  if (options.copy_to_fd >= 0) {
    copy_in = ScopedFd(::memfd_create("dsec-copy", MFD_CLOEXEC));
    if (!copy_in.valid()) return ErrnoToStatus("exec: memfd_create for a copy's data");
    for (size_t off = 0; off < options.stdin_data.size();) {
      ssize_t w = ::write(copy_in.get(), options.stdin_data.data() + off, options.stdin_data.size() - off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return ErrnoToStatus("exec: writing a copy's data");
      off += static_cast<size_t>(w);
    }
    if (::lseek(copy_in.get(), 0, SEEK_SET) != 0) return ErrnoToStatus("exec: lseek");
  }

  target.cgroups->ResetPeak();
  const uint64_t oom_before = target.cgroups->OomKills();
  const int control = target.init_control_fd;
  // A copy's stdout is the caller's descriptor; `out` then only ends at once.
  const bool copy = options.copy_to_fd >= 0;
  const int fds[kExecRequestFds] = {copy ? copy_in.get() : in.read.get(), copy ? options.copy_to_fd : out.write.get(),
                                    err.write.get(), error.write.get(), report.write.get()};
  auto left_ms = [&] { return (deadline - clock.NowNs()) / 1'000'000; };
  auto not_started = [] {
    return absl::DeadlineExceededError("exec: the sandbox's init did not start the process");
  };
  // The request and its answer, under the sandbox's lock: answers come in
  // the order of the requests; one left by an exec that gave up waiting
  // (an older seq) is read and dropped here.
  std::unique_lock<std::timed_mutex> request_lock(shared.mu, std::defer_lock);
  if (!request_lock.try_lock_until(std::chrono::steady_clock::now() +
                                   std::chrono::milliseconds(std::max<int64_t>(left_ms(), 0)))) {
    return not_started();
  }
  header.seq = ++shared.next_seq;
  if (!SendRequest(control, header, body, fds)) return InitGone();
  in.read.Reset();
  out.write.Reset();
  err.write.Reset();
  error.write.Reset();
  report.write.Reset();

  InitMessage m;
  ScopedFd pidfd;
  while (true) {
    pollfd p{control, POLLIN, 0};
    if (left_ms() <= 0) return not_started();
    int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms(), 1000)));
    if (ready < 0 && errno != EINTR) return ErrnoToStatus("exec: poll");
    if (ready <= 0) continue;
    if (!ReadInitMessage(control, &m, &pidfd)) return InitGone();
    if ((m.type == kInitSpawned || m.type == kInitSpawnFailed) && m.seq == header.seq) break;
    // A stale answer: the process it made has no one to wait for it.
    if (m.type == kInitSpawned && pidfd) ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
    pidfd.Reset();
  }
  request_lock.unlock();
  if (m.type == kInitSpawnFailed) {
    return ErrnoToStatus("exec: the sandbox's init could not start the process", m.value);
  }
  if (!pidfd) return absl::InternalError("exec: the init's answer came without a pidfd");
  if (options.on_spawned) options.on_spawned();
  const int32_t child = m.pid;  // in the sandbox's pid namespace
  pid_t host_pid = 0;           // looked up when needed (group kills)
  auto host_pgid = [&]() {
    if (host_pid == 0) host_pid = PidOfPidfd(pidfd.get());
    return host_pid;
  };

  ExecResult result;
  ExecPumpOptions pump_options;
  pump_options.clock = &clock;
  pump_options.output_cap_bytes = options.output_cap_bytes;
  pump_options.output_rate_bytes_per_s = options.output_rate_bytes_per_s;
  pump_options.deadline_ns = deadline;
  pump_options.exit_grace_ns = kKillGraceNs;
  pump_options.drain_after_exit_ns = kDrainNs;
  pump_options.drain_after_kill_ns = kKillGraceNs;
  StringOutputSink sink(&result.stdout_data, &result.stderr_data, options.on_output);
  // The timeout kills the process group, then, when no other exec of the
  // sandbox runs, anything else in its cgroups but its init
  // (double-forked, setsid'd strays). A caller's kill (the control's
  // SIGKILL: one command killed by its client) ends the group only.
  ExecPump pump(pump_options, std::move(in.write), std::move(out.read), std::move(err.read), &sink,
                [&] {
                  if (pid_t g = host_pgid(); g > 0) ::kill(-g, SIGKILL);
                  ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
                  if (pump.kill_reason() == ExecKill::kCaller || shared.running.load() > 1) return;
                  auto strays = target.cgroups->KillAll(target.init_pid, MonotonicNowNs() + kKillGraceNs);
                  if (strays.ok()) {
                    result.stray_processes_killed = *strays;
                  } else {
                    DSEC_LOG(warn, "container: exec kill: {}", strays.status().ToString());
                  }
                });
  if (!copy) pump.AppendStdin(options.stdin_data);
  if (copy || options.control == nullptr || !options.control->stdin_open()) pump.CloseStdin();
  // Other signals reach the process group, as a terminal's would.
  WatchExecControl(pump, options.control, [&](int sig) {
    if (pid_t g = host_pgid(); g > 0) ::kill(-g, sig);
    ::syscall(SYS_pidfd_send_signal, pidfd.get(), sig, nullptr, 0);
  });
  struct ControlEnd {
    ExecControl* c;
    ~ControlEnd() {
      if (c != nullptr) c->MarkEnded();
    }
  } control_end{options.control.get()};
  // The error pipe: a ChildError if the init's child could not exec, else EOF.
  ChildError exec_error{};
  bool have_error = false;
  pump.Watch([&](int64_t) { return ExecPump::Interest{error.read.get(), POLLIN}; },
             [&](short, int64_t) {
               if (::read(error.read.get(), &exec_error, sizeof(exec_error)) == sizeof(exec_error)) {
                 have_error = true;
               }
               error.read.Reset();
               return absl::OkStatus();
             });
  // The init reports the exit on the exec's report pipe.
  bool init_lost = false;
  pump.Watch(
      [&](int64_t) {
        return ExecPump::Interest{pump.exited() || init_lost ? -1 : report.read.get(), POLLIN};
      },
      [&](short, int64_t) {
        InitMessage exited;
        ssize_t n = ::read(report.read.get(), &exited, sizeof(exited));
        if (n < 0 && errno == EINTR) return absl::OkStatus();
        if (n != static_cast<ssize_t>(sizeof(exited)) || exited.type != kInitExited || exited.pid != child) {
          // EOF: the init died (the sandbox with it: its processes are
          // gone, so the pipes close and the pump ends) or dropped this
          // exec; there is no status to report.
          init_lost = true;
          pump.MarkExitUnknown();
          return absl::OkStatus();
        }
        if (WIFEXITED(exited.value)) result.exit_code = WEXITSTATUS(exited.value);
        if (WIFSIGNALED(exited.value)) result.signal = WTERMSIG(exited.value);
        result.peak_rss_bytes = exited.maxrss_kib * 1024;
        // The init SIGKILLed what the process left in its group; wait until
        // those members are gone, so that the exec returns without them.
        if (exited.group_left != 0 && !pump.killed()) {
          if (pid_t g = host_pgid(); g > 0) {
            auto left = target.cgroups->KillGroup(g, MonotonicNowNs() + kKillGraceNs);
            if (!left.ok()) {
              DSEC_LOG(warn, "container: exec group kill: {}", left.status().ToString());
            }
          }
        }
        pump.MarkExited();
        return absl::OkStatus();
      });
  if (absl::Status s = pump.Run(); !s.ok()) {
    return Annotate(s, absl::StrCat("exec: process ", child));
  }
  result.timed_out = pump.timed_out();
  result.stdout_dropped = pump.dropped_bytes(1);
  result.stderr_dropped = pump.dropped_bytes(2);
  result.wall_ns = clock.NowNs() - start;
  result.output_dropped_bytes = pump.dropped_bytes();
  result.cgroup_peak_bytes = target.cgroups->PeakMemoryBytes();
  result.oom_killed = target.cgroups->OomKills() > oom_before;
  if (have_error) {
    return ErrnoToStatus(absl::StrCat("exec ", options.argv[0], ": ", ChildStepName(exec_error.step)),
                         exec_error.err);
  }
  if (!pump.exited()) return InitGone();
  return result;
}

}  // namespace dsec::container
