// SPDX-License-Identifier: Apache-2.0
#include "sandbox/microvm/jail.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/clone3.h"
#include "base/status.h"

namespace dsec::microvm {

namespace {

constexpr unsigned kCloseRangeCloexec = 1u << 2;

// Child failure steps beyond the mount steps (which report their index).
constexpr int32_t kStepGo = -1;
constexpr int32_t kStepSession = -2;
constexpr int32_t kStepStdio = -3;
constexpr int32_t kStepNoNewPrivs = -4;
constexpr int32_t kStepCapabilities = -5;
constexpr int32_t kStepExec = -6;

struct ChildReport {
  int32_t step = 0;
  int32_t err = 0;
};

// Everything the child touches, as plain pointers into the JailSpec's
// strings: the child may only make syscalls (the parent has threads).
struct PreparedStep {
  MountStep::Kind kind;
  const char* source;
  const char* target;
  const char* fstype;
  const char* data;
  unsigned long flags;
  unsigned mode;
};
struct Prepared {
  std::vector<PreparedStep> steps;
  std::vector<char*> argv;
  std::vector<char*> envp;
  int stdio[3] = {-1, -1, -1};
  int null_fd = -1;
  int go_fd = -1;
  int report_fd = -1;
  std::vector<int> keep_fds;
  bool drop_capabilities = true;
  uint64_t keep_capabilities = 0;
};

const char* OrNull(const std::string& s) { return s.empty() ? nullptr : s.c_str(); }

[[noreturn]] void Fail(const Prepared& p, int32_t step, int err) {
  ChildReport r{step, err};
  ssize_t ignored = ::write(p.report_fd, &r, sizeof(r));
  (void)ignored;
  ::_exit(127);
}

int RunStep(const PreparedStep& s) {
  switch (s.kind) {
    case MountStep::Kind::kMkdir:
      if (::mkdir(s.target, s.mode) != 0 && errno != EEXIST) return errno;
      return 0;
    case MountStep::Kind::kTouch: {
      int fd = ::open(s.target, O_CREAT | O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0600);
      if (fd < 0) return errno;
      ::close(fd);
      return 0;
    }
    case MountStep::Kind::kMount:
      if (::mount(s.source, s.target, s.fstype, s.flags, s.data) != 0) return errno;
      return 0;
    case MountStep::Kind::kSymlink:
      if (::symlink(s.source, s.target) != 0 && errno != EEXIST) return errno;
      return 0;
    case MountStep::Kind::kPivot:
      if (::chdir(s.target) != 0) return errno;
      if (::syscall(SYS_pivot_root, ".", ".") != 0) return errno;
      if (::umount2(".", MNT_DETACH) != 0) return errno;
      if (::chdir("/") != 0) return errno;
      return 0;
  }
  return EINVAL;
}

// The child between clone3 and execve. Async-signal-safe calls only.
[[noreturn]] void ChildMain(const Prepared& p) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Wait until the parent has put us in the cgroups (EOF: it gave up).
  char go = 0;
  ssize_t n;
  do {
    n = ::read(p.go_fd, &go, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1) Fail(p, kStepGo, n < 0 ? errno : EPIPE);
  if (::setsid() < 0) Fail(p, kStepSession, errno);
  for (size_t i = 0; i < p.steps.size(); ++i) {
    if (int err = RunStep(p.steps[i]); err != 0) Fail(p, static_cast<int32_t>(i), err);
  }
  for (int target = 0; target < 3; ++target) {
    int src = p.stdio[target] >= 0 ? p.stdio[target] : p.null_fd;
    if (src == target) {
      if (::fcntl(target, F_SETFD, 0) < 0) Fail(p, kStepStdio, errno);
    } else if (::dup2(src, target) < 0) {
      Fail(p, kStepStdio, errno);
    }
  }
  // Only 0-2 cross the execve (marking keeps report_fd usable until then).
  ::syscall(SYS_close_range, 3u, ~0u, kCloseRangeCloexec);
  for (int fd : p.keep_fds) {
    if (::fcntl(fd, F_SETFD, 0) != 0) Fail(p, kStepStdio, errno);
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) Fail(p, kStepNoNewPrivs, errno);
  if (p.drop_capabilities) {
    // uid 0 regains its permitted set from the bounding set at execve:
    // empty the bounding set (but for the kept ones), then inheritable and
    // ambient; no_new_privs limits the exec'd permitted set to this one.
    for (int cap = 0; cap < 64; ++cap) {
      if ((p.keep_capabilities >> cap) & 1) continue;
      if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
        if (errno == EINVAL) break;  // past CAP_LAST_CAP
        Fail(p, kStepCapabilities, errno);
      }
    }
    ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    for (int i = 0; i < 2; ++i) {
      data[i].effective = data[i].permitted = static_cast<uint32_t>(p.keep_capabilities >> (32 * i));
    }
    if (::syscall(SYS_capset, &header, data) != 0) Fail(p, kStepCapabilities, errno);
  }
  ::execve(p.argv[0], p.argv.data(), p.envp.data());
  Fail(p, kStepExec, errno);
}

// The one long-lived thread that clones every jailed child (see jail.h).
// Never destroyed: it lives as long as the process. A fork()ed child of the
// process has the object but not its thread: it makes its own on first use
// (the copy is leaked; its mutex may have been held at the fork).
class Spawner {
 public:
  static Spawner& Get() {
    static std::once_flag once;
    std::call_once(once, [] { ::pthread_atfork(nullptr, nullptr, [] { instance_.store(nullptr); }); });
    Spawner* s = instance_.load();
    if (s != nullptr) return *s;
    auto* fresh = new Spawner();
    if (!instance_.compare_exchange_strong(s, fresh)) {
      delete fresh;  // another thread won; its spawner serves us
      return *s;
    }
    std::thread([fresh] { fresh->Loop(); }).detach();
    return *fresh;
  }

  // Runs `fn` on the spawner thread and returns its result.
  long Run(const std::function<long()>& fn) {
    Job job{&fn};
    std::unique_lock<std::mutex> lock(mu_);
    queue_.push_back(&job);
    cv_.notify_all();
    cv_.wait(lock, [&job] { return job.done; });
    return job.result;
  }

 private:
  struct Job {
    const std::function<long()>* fn;
    long result = 0;
    bool done = false;
  };

  Spawner() = default;

  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return !queue_.empty(); });
      Job* job = queue_.front();
      queue_.pop_front();
      lock.unlock();
      long r = (*job->fn)();
      lock.lock();
      job->result = r;
      job->done = true;
      cv_.notify_all();
    }
  }

  static inline std::atomic<Spawner*> instance_{nullptr};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job*> queue_;
};

std::string DescribeStep(const MountStep& s) {
  switch (s.kind) {
    case MountStep::Kind::kMkdir:
      return absl::StrCat("mkdir ", s.target);
    case MountStep::Kind::kTouch:
      return absl::StrCat("create ", s.target);
    case MountStep::Kind::kMount:
      if (s.flags & MS_REMOUNT) return absl::StrCat("remount ", s.target);
      if (s.flags & MS_BIND) return absl::StrCat("bind ", s.source, " on ", s.target);
      if (s.flags & (MS_PRIVATE | MS_SLAVE)) return absl::StrCat("make ", s.target, " private");
      return absl::StrCat("mount ", s.fstype, " on ", s.target);
    case MountStep::Kind::kSymlink:
      return absl::StrCat("symlink ", s.target, " -> ", s.source);
    case MountStep::Kind::kPivot:
      return absl::StrCat("pivot_root into ", s.target);
  }
  return "?";
}

std::string DescribeFailure(const JailSpec& spec, const ChildReport& r) {
  if (r.step >= 0 && static_cast<size_t>(r.step) < spec.steps.size()) {
    return DescribeStep(spec.steps[static_cast<size_t>(r.step)]);
  }
  switch (r.step) {
    case kStepGo:
      return "waiting for the cgroups";
    case kStepSession:
      return "setsid";
    case kStepStdio:
      return "stdio";
    case kStepNoNewPrivs:
      return "no_new_privs";
    case kStepCapabilities:
      return "dropping capabilities";
    case kStepExec:
      return absl::StrCat("execve ", spec.argv.empty() ? "" : spec.argv[0]);
  }
  return absl::StrCat("step ", r.step);
}

}  // namespace

MountStep MountStep::Mkdir(std::string target, unsigned mode) {
  MountStep s;
  s.kind = Kind::kMkdir;
  s.target = std::move(target);
  s.mode = mode;
  return s;
}

MountStep MountStep::Touch(std::string target) {
  MountStep s;
  s.kind = Kind::kTouch;
  s.target = std::move(target);
  return s;
}

MountStep MountStep::Mount(std::string source, std::string target, std::string fstype,
                           unsigned long flags, std::string data) {
  MountStep s;
  s.kind = Kind::kMount;
  s.source = std::move(source);
  s.target = std::move(target);
  s.fstype = std::move(fstype);
  s.flags = flags;
  s.data = std::move(data);
  return s;
}

MountStep MountStep::Bind(std::string source, std::string target, bool recursive) {
  return Mount(std::move(source), std::move(target), "", MS_BIND | (recursive ? MS_REC : 0));
}

MountStep MountStep::Remount(std::string target, unsigned long flags) {
  return Mount("", std::move(target), "", MS_REMOUNT | MS_BIND | flags);
}

MountStep MountStep::Symlink(std::string link_target, std::string path) {
  MountStep s;
  s.kind = Kind::kSymlink;
  s.source = std::move(link_target);
  s.target = std::move(path);
  return s;
}

MountStep MountStep::Pivot(std::string new_root) {
  MountStep s;
  s.kind = Kind::kPivot;
  s.target = std::move(new_root);
  return s;
}

std::vector<MountStep> MkdirAllSteps(const std::string& root, const std::string& dir) {
  std::vector<MountStep> out;
  std::string path = root;
  for (absl::string_view part : absl::StrSplit(dir, '/', absl::SkipEmpty())) {
    absl::StrAppend(&path, "/", part);
    out.push_back(MountStep::Mkdir(path));
  }
  return out;
}

std::string DescribeWaitStatus(int s) {
  if (s < 0) return "reaped elsewhere (status unknown)";
  if (WIFEXITED(s)) return absl::StrCat("exited with status ", WEXITSTATUS(s));
  if (WIFSIGNALED(s)) return absl::StrCat("killed by signal ", WTERMSIG(s));
  return absl::StrCat("wait status ", s);
}

bool WaitReadable(int fd, int64_t timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    int n = ::poll(&p, 1, timeout_ms < 0 ? -1 : static_cast<int>(std::min<int64_t>(timeout_ms, 1 << 30)));
    if (n < 0 && errno == EINTR) continue;
    return n > 0;
  }
}

absl::StatusOr<std::unique_ptr<JailedProcess>> JailedProcess::Start(const JailSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("jail: empty argv");
  if (!spec.steps.empty() && !(spec.namespaces & CLONE_NEWNS)) {
    return absl::InvalidArgumentError("jail: mount steps need a new mount namespace");
  }
  Prepared p;
  for (const MountStep& s : spec.steps) {
    p.steps.push_back({s.kind, OrNull(s.source), s.target.c_str(), OrNull(s.fstype), OrNull(s.data),
                       s.flags, s.mode});
  }
  for (const std::string& a : spec.argv) p.argv.push_back(const_cast<char*>(a.c_str()));
  p.argv.push_back(nullptr);
  for (const std::string& e : spec.env) p.envp.push_back(const_cast<char*>(e.c_str()));
  p.envp.push_back(nullptr);
  p.stdio[0] = spec.stdin_fd;
  p.stdio[1] = spec.stdout_fd;
  p.stdio[2] = spec.stderr_fd;
  p.drop_capabilities = spec.drop_capabilities;
  p.keep_capabilities = spec.keep_capabilities;
  for (int fd : spec.keep_fds) {
    if (fd < 3 || ::fcntl(fd, F_GETFD) < 0) {
      return absl::InvalidArgumentError(absl::StrCat("jail: descriptor ", fd, " to pass on is not open (or 0-2)"));
    }
  }
  p.keep_fds = spec.keep_fds;

  ScopedFd null_fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!null_fd) return ErrnoToStatus("open /dev/null");
  int go[2], report[2];
  if (::pipe2(go, O_CLOEXEC) != 0) return ErrnoToStatus("pipe2");
  ScopedFd go_read(go[0]), go_write(go[1]);
  if (::pipe2(report, O_CLOEXEC) != 0) return ErrnoToStatus("pipe2");
  ScopedFd report_read(report[0]), report_write(report[1]);
  p.null_fd = null_fd.get();
  p.go_fd = go_read.get();
  p.report_fd = report_write.get();

  int pidfd = -1;
  const uint64_t flags = spec.namespaces;
  std::function<long()> clone_child = [&p, &pidfd, flags]() -> long {
    long pid = Clone3(flags, &pidfd);
    if (pid == 0) ChildMain(p);
    return pid < 0 ? -errno : pid;
  };
  long pid = Spawner::Get().Run(clone_child);
  if (pid < 0) return ErrnoToStatus("clone3 jailed process", static_cast<int>(-pid));
  std::unique_ptr<JailedProcess> proc(new JailedProcess(static_cast<pid_t>(pid), ScopedFd(pidfd)));
  go_read.Reset();
  report_write.Reset();

  if (spec.cgroups != nullptr) {
    if (absl::Status s = spec.cgroups->AddProcess(proc->pid()); !s.ok()) {
      (void)proc->Kill();
      return Annotate(s, "jail: joining the cgroups");
    }
  }
  if (spec.join) {
    if (absl::Status s = spec.join(proc->pid()); !s.ok()) {
      (void)proc->Kill();
      return Annotate(s, "jail: joining the placement");
    }
  }
  char one = 1;
  if (::write(go_write.get(), &one, 1) != 1) {
    absl::Status s = ErrnoToStatus("jail: releasing the child");
    (void)proc->Kill();
    return s;
  }
  go_write.Reset();
  ChildReport r;
  ssize_t n;
  do {
    n = ::read(report_read.get(), &r, sizeof(r));
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(r))) {
    (void)proc->Kill();
    return ErrnoToStatus(absl::StrCat("jail: ", DescribeFailure(spec, r)), r.err);
  }
  return proc;  // EOF: execve closed the report pipe
}

JailedProcess::~JailedProcess() { (void)Kill(); }

bool JailedProcess::Exited() const {
  if (wait_status_) return true;
  return WaitReadable(pidfd_.get(), 0);
}

bool JailedProcess::Reap(int flags) {
  if (wait_status_) return true;
  siginfo_t info{};
  for (;;) {
    if (::waitid(static_cast<idtype_t>(3) /* P_PIDFD */, static_cast<id_t>(pidfd_.get()), &info,
                 WEXITED | flags) == 0) {
      break;
    }
    if (errno == EINTR) continue;
    if (errno == ECHILD) {  // someone else reaped it
      wait_status_ = -1;
      return true;
    }
    return false;
  }
  if (info.si_pid == 0) return false;  // WNOHANG, still running
  wait_status_ = info.si_code == CLD_EXITED ? W_EXITCODE(info.si_status, 0)
                                            : W_EXITCODE(0, info.si_status);
  return true;
}

absl::StatusOr<int> JailedProcess::WaitExit(int64_t timeout_ms) {
  if (wait_status_) return *wait_status_;
  if (!WaitReadable(pidfd_.get(), timeout_ms)) {
    return absl::DeadlineExceededError(absl::StrCat("process ", pid_, " still runs"));
  }
  if (!Reap(0)) return ErrnoToStatus(absl::StrCat("waitid ", pid_));
  return *wait_status_;
}

absl::Status JailedProcess::Signal(int sig) const {
  if (wait_status_) return absl::OkStatus();
  if (::syscall(SYS_pidfd_send_signal, pidfd_.get(), sig, nullptr, 0) != 0 && errno != ESRCH) {
    return ErrnoToStatus(absl::StrCat("pidfd_send_signal ", pid_));
  }
  return absl::OkStatus();
}

absl::Status JailedProcess::Kill(int first_signal, int64_t grace_ms) {
  if (wait_status_ || !pidfd_) return absl::OkStatus();
  if (first_signal != 0) {
    (void)Signal(first_signal);
    if (WaitReadable(pidfd_.get(), grace_ms) && Reap(0)) return absl::OkStatus();
  }
  DSEC_RETURN_IF_ERROR(Signal(SIGKILL));
  if (!Reap(0)) return ErrnoToStatus(absl::StrCat("waitid ", pid_));
  return absl::OkStatus();
}

absl::Status RemoveCgroupTree(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return errno == ENOENT ? absl::OkStatus() : ErrnoToStatus(absl::StrCat("opendir ", dir));
  std::vector<std::string> children;
  while (dirent* e = ::readdir(d)) {
    if (e->d_type == DT_DIR && std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      children.push_back(absl::StrCat(dir, "/", e->d_name));
    }
  }
  ::closedir(d);
  absl::Status first;
  for (const std::string& c : children) {
    absl::Status s = RemoveCgroupTree(c);
    if (!s.ok() && first.ok()) first = s;
  }
  absl::Status s = container::KillAndRemoveCgroup(dir);
  return first.ok() ? s : first;
}

}  // namespace dsec::microvm
