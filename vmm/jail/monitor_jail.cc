// SPDX-License-Identifier: Apache-2.0
#include "vmm/jail/monitor_jail.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/file_io.h"
#include "base/status.h"

namespace dsec::jail {

namespace {

constexpr int64_t kGateWaitNs = 10'000'000'000;  // monotonic: a wall clock step cannot cut it short

bool Readable(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

}  // namespace

absl::Status ValidateJailOptions(const JailOptions& o) {
  if (o.uid.has_value() != o.gid.has_value()) {
    return absl::InvalidArgumentError("--uid and --gid go together");
  }
  if (o.uid.has_value() && (*o.uid == 0 || *o.gid == 0)) {
    return absl::InvalidArgumentError("--uid/--gid: the monitor's ids must not be 0");
  }
  DSEC_RETURN_IF_ERROR(CheckFilterExtras(o.extras));
  for (const std::string& h : o.test_hooks) {
    if (absl::StartsWith(h, "syscall:")) {
      if (absl::Status s = ParseThreadKind(std::string_view(h).substr(8)).status(); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("--test-hook ", h, ": ", s.message()));
      }
    } else if (!absl::StartsWith(h, "open:") || h.size() == 5) {
      return absl::InvalidArgumentError(
          absl::StrCat("--test-hook ", h, ": expected syscall:KIND or open:PATH"));
    }
  }
  return absl::OkStatus();
}

void MonitorJail::RunHooks(ThreadKind kind) const {
  for (const std::string& h : options_.test_hooks) {
    if (absl::StartsWith(h, "syscall:") && h.substr(8) == ThreadKindName(kind)) {
      // Not in any thread's list: with the filter on, the process dies here.
      long r = ::syscall(SYS_getppid);
      std::fprintf(stderr, "dsec-monitor: test hook: getppid on a %s thread returned %ld\n",
                   std::string(ThreadKindName(kind)).c_str(), r);
    } else if (kind == ThreadKind::kMain && absl::StartsWith(h, "open:")) {
      const std::string path = h.substr(5);
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      const int err = errno;
      std::fprintf(stderr, "dsec-monitor: test hook: open %s: %s\n", path.c_str(),
                   fd >= 0 ? "opened" : std::strerror(err));
      if (fd >= 0) ::close(fd);
    }
  }
}

absl::Status MonitorJail::EnterThread(ThreadKind kind) {
  {
    absl::MutexLock lock(&mu_);
    ++waiting_;
    auto open = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return open_; };
    mu_.Await(absl::Condition(&open));
    if (!gate_status_.ok()) return gate_status_;
  }
  if (absl::Status s = InstallThreadFilter(kind, options_.seccomp, options_.extras); !s.ok()) {
    return absl::InternalError(
        absl::StrCat("the ", std::string(ThreadKindName(kind)), " thread's filter: ", s.message()));
  }
  RunHooks(kind);
  return absl::OkStatus();
}

absl::Status MonitorJail::Lock(int expected_threads, int abort_fd) {
  absl::Status s = LockLocked(expected_threads, abort_fd);
  // The main thread is filtered before the gate opens, so that whatever the
  // other threads serve once through it (the control socket's answers) comes
  // from a monitor that is wholly locked in.
  if (s.ok()) s = InstallThreadFilter(ThreadKind::kMain, options_.seccomp, options_.extras);
  {
    absl::MutexLock lock(&mu_);
    gate_status_ = s.ok() ? absl::OkStatus()
                          : absl::AbortedError(absl::StrCat("the jail failed: ", s.message()));
    open_ = true;
  }
  if (!s.ok()) return s;
  RunHooks(ThreadKind::kMain);
  return absl::OkStatus();
}

void MonitorJail::Abort(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (open_) return;
  gate_status_ = absl::AbortedError(absl::StrCat("the monitor did not start: ", why.message()));
  open_ = true;
}

absl::Status MonitorJail::LockLocked(int expected_threads, int abort_fd) {
  const int64_t deadline = MonotonicNowNs() + kGateWaitNs;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto arrived = [this, expected_threads]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return waiting_ >= expected_threads;
      };
      if (mu_.AwaitWithTimeout(absl::Condition(&arrived), absl::Milliseconds(20))) break;
    }
    if (Readable(abort_fd)) {
      return absl::AbortedError("the VM stopped before its threads reached the jail");
    }
    if (MonotonicNowNs() > deadline) {
      absl::MutexLock lock(&mu_);
      return absl::DeadlineExceededError(absl::StrCat(
          waiting_, " of ", expected_threads, " monitor threads reached the jail in 10 s"));
    }
  }
  // A thread this code did not start would run unfiltered. A thread just
  // joined (the CPU-frequency warm-up, joined right before Lock) can still
  // be listed for a moment: pthread_join returns when the kernel clears its
  // tid, before the task leaves the thread group. So an extra task counts
  // only if it is still there after 200 ms.
  absl::StatusOr<std::vector<std::string>> tasks = ListDirectory("/proc/self/task");
  for (int waited_ms = 0; tasks.ok() && static_cast<int>(tasks->size()) > expected_threads + 1 &&
                          waited_ms < 200;
       ++waited_ms) {
    ::usleep(1000);
    tasks = ListDirectory("/proc/self/task");
  }
  if (!tasks.ok()) return tasks.status();
  if (static_cast<int>(tasks->size()) != expected_threads + 1) {
    std::string msg = absl::StrCat("the monitor has ", tasks->size(), " threads, expected ",
                                   expected_threads + 1, ": one would run without a filter");
    if (options_.seccomp == SeccompMode::kKill) return absl::InternalError(msg);
    std::fprintf(stderr, "dsec-monitor: warning: %s\n", msg.c_str());
  }
  // A call off a thread's list ends the monitor with one line that names it.
  if (options_.seccomp == SeccompMode::kKill) {
    if (absl::Status s = InstallSigsysReporter(); !s.ok()) return s;
  }
  // A killed monitor must not write its guest's memory to a core file.
  rlimit no_core{0, 0};
  if (::setrlimit(RLIMIT_CORE, &no_core) != 0) return ErrnoToStatus("setrlimit(RLIMIT_CORE)");
  if (options_.uid.has_value()) {
    if (absl::Status s = DropPrivileges(*options_.uid, *options_.gid); !s.ok()) return s;
  }
  credentials_ = CurrentCredentials();
  return absl::OkStatus();
}

}  // namespace dsec::jail
