// SPDX-License-Identifier: Apache-2.0
#include "base/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/exec_pump.h"
#include "base/status.h"

extern char** environ;

namespace dsec {

namespace {

constexpr int kStdFds = 3;

// The child's environment as NAME=VALUE strings (see SpawnOptions::env).
std::vector<std::string> ChildEnvironment(const SpawnOptions& o) {
  std::vector<std::string> env;
  // NAME=VALUE replaces NAME's entry or is added; NAME alone removes it.
  auto set = [&env](const std::string& entry) {
    const size_t eq = entry.find('=');
    const std::string prefix = eq == std::string::npos ? entry + "=" : entry.substr(0, eq + 1);
    std::erase_if(env, [&prefix](const std::string& e) { return e.rfind(prefix, 0) == 0; });
    if (eq != std::string::npos) env.push_back(entry);
  };
  if (o.inherit_env) {
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  } else {
    const char* path = std::getenv("PATH");
    env.push_back(absl::StrCat("PATH=", path != nullptr ? path : "/usr/sbin:/usr/bin:/sbin:/bin"));
  }
  for (const std::string& e : o.env) set(e);
  return env;
}

// argv[0] as execve wants it: a name without '/' is looked up in the
// child's PATH, here, so that the child (possibly a fork of a threaded
// process) only calls execve. ENOENT (or EACCES) when nothing is found.
int ResolveProgram(const std::string& name, const std::vector<std::string>& env, std::string* path) {
  if (name.find('/') != std::string::npos) {
    *path = name;
    return 0;
  }
  std::string dirs = "/usr/local/bin:/usr/bin:/bin";
  for (const std::string& e : env) {
    if (e.rfind("PATH=", 0) == 0) dirs = e.substr(5);
  }
  int err = ENOENT;
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    const std::string candidate = absl::StrCat(dir, "/", name);
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (::access(candidate.c_str(), X_OK) == 0) {
        *path = candidate;
        return 0;
      }
      err = EACCES;
    }
    start = end + 1;
  }
  return err;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// What each of fds 0-2 of the child becomes: an fd of this process to dup2
// (-1: left as inherited), or stderr = stdout.
struct StdioPlan {
  int source[kStdFds] = {-1, -1, -1};
  bool err_to_out = false;
  std::vector<ScopedFd> owned;  // /dev/null, files and pipe write ends
  ScopedFd capture[kStdFds];    // read ends, for out and err
};

absl::Status PlanStream(const Stdio& s, int target, StdioPlan& plan) {
  const bool input = target == 0;
  switch (s.kind) {
    case Stdio::Kind::kInherit:
      return absl::OkStatus();
    case Stdio::Kind::kFd:
      if (s.fd < 0) return absl::InvalidArgumentError("Stdio::Fd without a descriptor");
      if (s.fd == target) return absl::OkStatus();  // the same number: inherited
      if (s.fd < kStdFds) {
        // Another of 0-2 may be replaced before this one is copied: copy it
        // above them first.
        ScopedFd copy(::fcntl(s.fd, F_DUPFD_CLOEXEC, kStdFds));
        if (!copy) return ErrnoStatus("fcntl(F_DUPFD_CLOEXEC)");
        plan.source[target] = copy.get();
        plan.owned.push_back(std::move(copy));
        return absl::OkStatus();
      }
      plan.source[target] = s.fd;
      return absl::OkStatus();
    case Stdio::Kind::kStdout:
      if (target != 2) return absl::InvalidArgumentError("Stdio::SameAsStdout is for stderr only");
      plan.err_to_out = true;
      return absl::OkStatus();
    case Stdio::Kind::kCapture: {
      if (input) return absl::InvalidArgumentError("stdin cannot be captured");
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe2");
      plan.capture[target].Reset(fds[0]);
      ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
      plan.source[target] = fds[1];
      plan.owned.emplace_back(fds[1]);
      return absl::OkStatus();
    }
    case Stdio::Kind::kNull:
    case Stdio::Kind::kFile: {
      const bool null = s.kind == Stdio::Kind::kNull;
      const std::string path = null ? "/dev/null" : s.path;
      const int flags = input ? O_RDONLY : (null ? O_WRONLY : O_WRONLY | O_CREAT | O_TRUNC);
      ScopedFd fd(::open(path.c_str(), flags | O_CLOEXEC, 0644));
      if (!fd) return ErrnoToStatus(absl::StrCat("open ", path));
      plan.source[target] = fd.get();
      plan.owned.push_back(std::move(fd));
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError("bad Stdio kind");
}

// In the forked child: reports errno on `report_fd` and exits 127.
[[noreturn]] void ChildFailed(int report_fd) {
  int err = errno;
  (void)!::write(report_fd, &err, sizeof(err));
  ::_exit(127);
}

// Everything the forked child does before execve: async-signal-safe calls
// only (this process may have other threads). Reports errno on `report_fd`
// and exits 127 when a step fails.
[[noreturn]] void ForkedChild(const SpawnOptions& o, const StdioPlan& plan, const char* program,
                              char* const* argv, char* const* envp,
                              const std::vector<const char*>& procs, const char* cwd, int report_fd) {
  auto fail = [report_fd]() { ChildFailed(report_fd); };
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);  // EINVAL for KILL/STOP
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (o.new_session && ::setsid() < 0) fail();
  if (o.mount_ns_fd >= 0 && ::setns(o.mount_ns_fd, CLONE_NEWNS) != 0) fail();
  for (const char* p : procs) {
    int fd = ::open(p, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, "0", 1) != 1) fail();
    ::close(fd);
  }
  for (int t = 0; t < kStdFds; ++t) {
    if (plan.source[t] >= 0 && ::dup2(plan.source[t], t) < 0) fail();
  }
  if (plan.err_to_out && ::dup2(1, 2) < 0) fail();
  if (cwd != nullptr && ::chdir(cwd) != 0) fail();
  ::execve(program, argv, envp);
  ChildFailed(report_fd);
}

absl::StatusOr<pid_t> ForkExec(const SpawnOptions& o, const StdioPlan& plan, const std::string& program,
                               char* const* argv, char* const* envp) {
  std::vector<const char*> procs;
  for (const std::string& p : o.join_cgroup_procs) procs.push_back(p.c_str());
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return ErrnoStatus("pipe2");
  ScopedFd report_r(report[0]), report_w(report[1]);
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoToStatus("fork");
  if (pid == 0) {
    ForkedChild(o, plan, program.c_str(), argv, envp, procs, o.cwd.empty() ? nullptr : o.cwd.c_str(),
                report_w.get());
  }
  report_w.Reset();
  // EOF: the exec succeeded (the close-on-exec write end went with it).
  int err = 0;
  ssize_t n;
  do {
    n = ::read(report_r.get(), &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  if (n == sizeof(err)) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return ErrnoToStatus(absl::StrCat("start ", program), err);
  }
  return pid;
}

absl::StatusOr<pid_t> PosixSpawn(const SpawnOptions& o, const StdioPlan& plan, const std::string& program,
                                 char* const* argv, char* const* envp) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  for (int t = 0; t < kStdFds; ++t) {
    if (plan.source[t] >= 0) posix_spawn_file_actions_adddup2(&actions, plan.source[t], t);
  }
  if (plan.err_to_out) posix_spawn_file_actions_adddup2(&actions, 1, 2);
  if (!o.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, o.cwd.c_str());
  // Children start with default signal dispositions and an empty mask.
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  short flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK;
  if (o.new_session) flags |= POSIX_SPAWN_SETSID;
  posix_spawnattr_setflags(&attr, flags);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, program.c_str(), &actions, &attr, argv, envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return ErrnoToStatus(absl::StrCat("start ", program), rc);
  return pid;
}

// The last `max_bytes` of each stream: an error message is at the end of a
// tool's output. Trimmed in large steps, so that a flood costs linear time.
class TailSink final : public ExecOutputSink {
 public:
  TailSink(std::string* out, std::string* err, size_t max_bytes)
      : out_(out), err_(err), max_bytes_(max_bytes) {}
  absl::Status Write(int stream, std::string_view bytes) override {
    std::string& text = stream == 2 ? *err_ : *out_;
    text.append(bytes);
    if (text.size() > 2 * max_bytes_ + (64 << 10)) text.erase(0, text.size() - max_bytes_);
    return absl::OkStatus();
  }

 private:
  std::string* out_;
  std::string* err_;
  size_t max_bytes_;
};

void KeepTail(std::string& text, size_t max_bytes) {
  if (text.size() > max_bytes) text.erase(0, text.size() - max_bytes);
}

}  // namespace

std::string SubprocessResult::Describe() const {
  std::string what;
  if (signal != 0) {
    what = absl::StrCat("killed by signal ", signal);
  } else {
    what = absl::StrCat("exited ", exit_code);
  }
  if (timed_out) absl::StrAppend(&what, ", timed out");
  std::string tail = err;
  while (!tail.empty() && tail.back() == '\n') tail.pop_back();
  if (!tail.empty()) absl::StrAppend(&what, ": ", tail);
  return what;
}

absl::StatusOr<Subprocess> Subprocess::Spawn(const SpawnOptions& o) {
  if (o.argv.empty()) return absl::InvalidArgumentError("spawn: empty argv");
  std::vector<std::string> env = ChildEnvironment(o);
  std::string program;
  if (int err = ResolveProgram(o.argv[0], env, &program); err != 0) {
    return ErrnoToStatus(absl::StrCat("start ", o.argv[0]), err);
  }
  StdioPlan plan;
  DSEC_RETURN_IF_ERROR(PlanStream(o.in, 0, plan));
  DSEC_RETURN_IF_ERROR(PlanStream(o.out, 1, plan));
  DSEC_RETURN_IF_ERROR(PlanStream(o.err, 2, plan));
  std::vector<std::string> argv_strings = o.argv;
  std::vector<char*> argv = CStrings(argv_strings);
  std::vector<char*> envp = CStrings(env);

  Subprocess p;
  p.capture_max_bytes_ = o.capture_max_bytes;
  p.spawn_ns_ = MonotonicNowNs();
  const bool fork_needed = o.force_fork || o.mount_ns_fd >= 0 || !o.join_cgroup_procs.empty();
  DSEC_ASSIGN_OR_RETURN(p.pid_, fork_needed ? ForkExec(o, plan, program, argv.data(), envp.data())
                                            : PosixSpawn(o, plan, program, argv.data(), envp.data()));
  // Not yet reaped, so the pid cannot have been reused. Without a pidfd
  // (Linux < 5.3) the child is killed and reaped by p's destructor.
  p.pidfd_.Reset(static_cast<int>(::syscall(SYS_pidfd_open, p.pid_, 0)));
  if (!p.pidfd_) return ErrnoToStatus("pidfd_open");
  p.out_ = std::move(plan.capture[1]);
  p.err_ = std::move(plan.capture[2]);
  return p;
}

Subprocess::Subprocess(Subprocess&& other) noexcept { TakeFrom(other); }

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    Kill();
    TakeFrom(other);
  }
  return *this;
}

void Subprocess::TakeFrom(Subprocess& other) {
  pid_ = std::exchange(other.pid_, -1);
  pidfd_ = std::move(other.pidfd_);
  out_ = std::move(other.out_);
  err_ = std::move(other.err_);
  capture_max_bytes_ = other.capture_max_bytes_;
  spawn_ns_ = other.spawn_ns_;
  timed_out_ = other.timed_out_;
  out_text_ = std::move(other.out_text_);
  err_text_ = std::move(other.err_text_);
}

void Subprocess::Kill() {
  if (pid_ <= 0) return;
  (void)Signal(SIGKILL);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  pidfd_.Reset();
}

Subprocess::~Subprocess() { Kill(); }

absl::Status Subprocess::Signal(int sig) {
  if (pid_ <= 0) return absl::OkStatus();
  // Without a pidfd (only while Spawn fails on a kernel without
  // pidfd_open), the pid: not yet reaped, so not reused either.
  int rc = pidfd_ ? static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd_.get(), sig, nullptr, 0))
                  : ::kill(pid_, sig);
  if (rc != 0 && errno != ESRCH) return ErrnoToStatus(absl::StrCat("signal ", sig, " to pid ", pid_));
  return absl::OkStatus();
}

SubprocessResult Subprocess::Reaped(int status, const struct rusage& usage) {
  SubprocessResult r;
  r.wait_status = status;
  if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  } else {
    r.exit_code = WEXITSTATUS(status);
  }
  r.timed_out = timed_out_;
  r.write_bytes = static_cast<uint64_t>(usage.ru_oublock) * 512;
  r.peak_rss_kib = static_cast<uint64_t>(usage.ru_maxrss);
  r.spawn_ns = spawn_ns_;
  r.exit_ns = MonotonicNowNs();
  KeepTail(out_text_, capture_max_bytes_);
  KeepTail(err_text_, capture_max_bytes_);
  r.out = std::move(out_text_);
  r.err = std::move(err_text_);
  pid_ = -1;
  pidfd_.Reset();
  return r;
}

absl::StatusOr<SubprocessResult> Subprocess::Finish(int64_t deadline_ns, int64_t drain_after_exit_ns) {
  ExecPumpOptions o;
  o.deadline_ns = deadline_ns;
  o.drain_after_exit_ns = drain_after_exit_ns;
  // A killed child: what its pipes hold when its exit is reported is read,
  // nothing more is waited for.
  o.drain_after_kill_ns = 0;
  TailSink sink(&out_text_, &err_text_, capture_max_bytes_);
  ExecPump pump(o, ScopedFd(), std::move(out_), std::move(err_), &sink, [this] { (void)Signal(SIGKILL); });
  // The exit: the pidfd turns readable (and stays so: not watched after).
  const int pidfd = pidfd_.get();
  pump.Watch([&pump, pidfd](int64_t) { return ExecPump::Interest{pump.exited() ? -1 : pidfd, POLLIN}; },
             [&pump](short, int64_t) {
               pump.MarkExited();
               return absl::OkStatus();
             });
  absl::Status s = pump.Run();
  timed_out_ = pump.timed_out();
  if (!s.ok()) {
    Kill();
    return s;
  }
  int status = 0;
  struct rusage usage {};
  while (::wait4(pid_, &status, 0, &usage) < 0) {
    if (errno != EINTR) return ErrnoToStatus(absl::StrCat("wait4 ", pid_));
  }
  return Reaped(status, usage);
}

absl::StatusOr<SubprocessResult> Subprocess::Wait(int64_t timeout_ms) {
  if (pid_ <= 0) return absl::FailedPreconditionError("Subprocess::Wait: no child");
  if (timeout_ms < 0) return Finish(kExecNoDeadline, kExecNoDeadline);
  const int64_t timeout_ns = timeout_ms * 1'000'000;
  return Finish(MonotonicNowNs() + timeout_ns, timeout_ns);
}

absl::StatusOr<std::optional<SubprocessResult>> Subprocess::Poll() {
  if (pid_ <= 0) return absl::FailedPreconditionError("Subprocess::Poll: no child");
  pollfd p{pidfd_.get(), POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&p, 1, 0);
  } while (ready < 0 && errno == EINTR);
  if (ready < 0) return ErrnoStatus("poll pidfd");
  if (ready == 0) return std::optional<SubprocessResult>();
  // Exited: what the pipes hold now is read; descendants that keep them
  // open are not waited for.
  DSEC_ASSIGN_OR_RETURN(SubprocessResult r, Finish(kExecNoDeadline, 0));
  return std::optional<SubprocessResult>(std::move(r));
}

absl::StatusOr<SubprocessResult> RunSubprocess(const SpawnOptions& options) {
  DSEC_ASSIGN_OR_RETURN(Subprocess p, Subprocess::Spawn(options));
  return p.Wait(options.timeout_ms);
}

absl::StatusOr<SubprocessResult> RunSubprocessChecked(const SpawnOptions& options) {
  DSEC_ASSIGN_OR_RETURN(SubprocessResult r, RunSubprocess(options));
  if (!r.Succeeded()) return absl::InternalError(absl::StrCat(options.argv[0], " ", r.Describe()));
  return r;
}

}  // namespace dsec
