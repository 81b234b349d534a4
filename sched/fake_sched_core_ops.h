// SPDX-License-Identifier: Apache-2.0
// Test support: a SchedCoreOps that models cookies per tid in memory, or
// fails every call with a chosen errno.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <map>

#include "absl/synchronization/mutex.h"
#include "sched/core_sched.h"

namespace dsec::sched::testing {

class FakeSchedCoreOps : public SchedCoreOps {
 public:
  // errno for every call; 0 = behave like a kernel with core scheduling.
  explicit FakeSchedCoreOps(int fail_errno = 0, int fail_create_errno = 0)
      : fail_errno_(fail_errno), fail_create_errno_(fail_create_errno) {}

  int Get(pid_t pid, CoreSchedScope, uint64_t* cookie) override {
    absl::MutexLock lock(&mu_);
    if (fail_errno_) return fail_errno_;
    *cookie = cookies_[Resolve(pid)];
    return 0;
  }
  int Create(pid_t pid, CoreSchedScope) override {
    absl::MutexLock lock(&mu_);
    if (fail_errno_) return fail_errno_;
    if (fail_create_errno_) return fail_create_errno_;
    cookies_[Resolve(pid)] = ++next_;
    return 0;
  }
  int ShareTo(pid_t pid, CoreSchedScope) override {
    absl::MutexLock lock(&mu_);
    if (fail_errno_) return fail_errno_;
    cookies_[pid] = cookies_[Self()];
    return 0;
  }
  int ShareFrom(pid_t pid) override {
    absl::MutexLock lock(&mu_);
    if (fail_errno_) return fail_errno_;
    if (!cookies_.count(pid)) return ESRCH;
    cookies_[Self()] = cookies_[pid];
    return 0;
  }
  uint64_t CookieOf(pid_t tid) {
    absl::MutexLock lock(&mu_);
    return cookies_[tid];
  }

 private:
  static pid_t Self() { return static_cast<pid_t>(::syscall(SYS_gettid)); }
  static pid_t Resolve(pid_t pid) { return pid == 0 ? Self() : pid; }

  const int fail_errno_;
  const int fail_create_errno_;
  absl::Mutex mu_;
  std::map<pid_t, uint64_t> cookies_;
  uint64_t next_ = 0;
};

}  // namespace dsec::sched::testing
