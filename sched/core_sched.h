// SPDX-License-Identifier: Apache-2.0
// Linux core scheduling (prctl PR_SCHED_CORE, Linux 5.14+): tasks with
// different cookies never run on SMT siblings of one core at the same time,
// so an LS sandbox cannot share a core's execution units with a stranger.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dsec::sched {

// PR_SCHED_CORE_SCOPE_*: which tasks of `pid` a call applies to.
enum class CoreSchedScope {
  kThread = 0,
  kThreadGroup = 1,
  kProcessGroup = 2,
};

// The four PR_SCHED_CORE commands behind an interface so that tests can
// inject the kernel's errors. Each returns 0 or the errno of the failure.
// Thread-safe (the system implementation is stateless).
class SchedCoreOps {
 public:
  virtual ~SchedCoreOps() = default;
  virtual int Get(pid_t pid, CoreSchedScope scope, uint64_t* cookie) = 0;
  virtual int Create(pid_t pid, CoreSchedScope scope) = 0;
  // Pushes the calling thread's cookie to `pid`.
  virtual int ShareTo(pid_t pid, CoreSchedScope scope) = 0;
  // Pulls `pid`'s cookie into the calling thread.
  virtual int ShareFrom(pid_t pid) = 0;
};

// prctl(2) itself. The returned object lives for the whole process.
SchedCoreOps& SystemSchedCoreOps();

// Asks the kernel for the calling thread's cookie. OK if core scheduling
// works; Unavailable naming the errno otherwise (EINVAL: kernel built
// without CONFIG_SCHED_CORE; ENODEV: no SMT on this machine; EPERM: a
// seccomp filter or LSM forbids it) -- every one of which means "use the
// cpuset fallback".
absl::Status ProbeCoreScheduling(SchedCoreOps& ops);

// One core-scheduling cookie, shared by every thread of one sandbox.
//
// The kernel has no handle for a cookie: it lives in the tasks that carry
// it, and SHARE_FROM copies it from a live task. So this object remembers
// the holder (the thread that created it) and threads join by pulling from
// it. Threads created by a thread that carries the cookie inherit it (the
// kernel copies it on clone), so creating the cookie on a monitor's main
// thread before it spawns vCPU threads covers them all; JoinCurrentThread
// from each vCPU thread makes that explicit and also covers threads created
// earlier. Joining fails once the holder thread has exited, so create it on
// a thread that outlives the sandbox's others.
// Thread-safe: const methods may be called from any thread.
class CoreSchedCookie {
 public:
  // PR_SCHED_CORE_CREATE for the calling thread, which becomes the holder.
  // Unavailable if the kernel refuses (see ProbeCoreScheduling).
  static absl::StatusOr<CoreSchedCookie> CreateForCurrentThread(
      SchedCoreOps& ops = SystemSchedCoreOps());

  // Gives the calling thread this cookie (SHARE_FROM the holder).
  absl::Status JoinCurrentThread() const;
  // Gives `pid` (a thread, or with kThreadGroup a whole process, e.g. a
  // container's init before exec) this cookie. The caller must carry the
  // cookie (SHARE_TO pushes the caller's own): FailedPrecondition if not.
  absl::Status ShareTo(pid_t pid, CoreSchedScope scope) const;
  // True if the calling thread carries this cookie.
  absl::StatusOr<bool> CurrentThreadCarries() const;

  // The kernel's opaque cookie value (as PR_SCHED_CORE_GET reports it).
  uint64_t value() const { return value_; }
  pid_t holder_tid() const { return holder_tid_; }

 private:
  CoreSchedCookie(SchedCoreOps* ops, pid_t holder, uint64_t value)
      : ops_(ops), holder_tid_(holder), value_(value) {}

  SchedCoreOps* ops_;
  pid_t holder_tid_;
  uint64_t value_;
};

// Maps an errno from a PR_SCHED_CORE call to a status: EINVAL/ENODEV/
// ENOSYS/EPERM/EOPNOTSUPP -> Unavailable (the fallback applies), ESRCH ->
// NotFound, others -> Internal; the message names the command and errno.
absl::Status SchedCoreErrno(const char* command, int err);

}  // namespace dsec::sched
