// SPDX-License-Identifier: Apache-2.0
#include "sched/core_sched.h"

#include <linux/prctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace dsec::sched {

namespace {

class SystemOps final : public SchedCoreOps {
 public:
  int Get(pid_t pid, CoreSchedScope scope, uint64_t* cookie) override {
    return Call(PR_SCHED_CORE_GET, pid, scope, reinterpret_cast<unsigned long>(cookie));
  }
  int Create(pid_t pid, CoreSchedScope scope) override {
    return Call(PR_SCHED_CORE_CREATE, pid, scope, 0);
  }
  int ShareTo(pid_t pid, CoreSchedScope scope) override {
    return Call(PR_SCHED_CORE_SHARE_TO, pid, scope, 0);
  }
  int ShareFrom(pid_t pid) override {
    // SHARE_FROM only takes the thread scope.
    return Call(PR_SCHED_CORE_SHARE_FROM, pid, CoreSchedScope::kThread, 0);
  }

 private:
  static int Call(unsigned long cmd, pid_t pid, CoreSchedScope scope, unsigned long arg5) {
    int rc = ::prctl(PR_SCHED_CORE, cmd, static_cast<unsigned long>(pid),
                     static_cast<unsigned long>(scope), arg5);
    return rc == 0 ? 0 : errno;
  }
};

pid_t CurrentTid() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

}  // namespace

SchedCoreOps& SystemSchedCoreOps() {
  static SystemOps* ops = new SystemOps();
  return *ops;
}

absl::Status SchedCoreErrno(const char* command, int err) {
  std::string what = absl::StrCat("prctl(PR_SCHED_CORE, ", command, ")");
  switch (err) {
    case EINVAL:
    case ENODEV:
    case ENOSYS:
    case EOPNOTSUPP:
    case EPERM:
      return absl::UnavailableError(absl::StrCat(
          "kernel lacks core scheduling (", what, ": ", strerrorname_np(err), ")"));
    case ESRCH:
      return absl::NotFoundError(absl::StrCat(what, ": no such task (ESRCH)"));
    default:
      return ErrnoStatus(what, err);
  }
}

absl::Status ProbeCoreScheduling(SchedCoreOps& ops) {
  uint64_t cookie = 0;
  int err = ops.Get(0, CoreSchedScope::kThread, &cookie);
  return err == 0 ? absl::OkStatus() : SchedCoreErrno("GET", err);
}

absl::StatusOr<CoreSchedCookie> CoreSchedCookie::CreateForCurrentThread(SchedCoreOps& ops) {
  if (int err = ops.Create(0, CoreSchedScope::kThread); err != 0) {
    return SchedCoreErrno("CREATE", err);
  }
  uint64_t value = 0;
  if (int err = ops.Get(0, CoreSchedScope::kThread, &value); err != 0) {
    return SchedCoreErrno("GET", err);
  }
  return CoreSchedCookie(&ops, CurrentTid(), value);
}

absl::Status CoreSchedCookie::JoinCurrentThread() const {
  if (CurrentTid() == holder_tid_) return absl::OkStatus();
  if (int err = ops_->ShareFrom(holder_tid_); err != 0) {
    return SchedCoreErrno("SHARE_FROM", err);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> CoreSchedCookie::CurrentThreadCarries() const {
  uint64_t value = 0;
  if (int err = ops_->Get(0, CoreSchedScope::kThread, &value); err != 0) {
    return SchedCoreErrno("GET", err);
  }
  return value == value_;
}

absl::Status CoreSchedCookie::ShareTo(pid_t pid, CoreSchedScope scope) const {
  DSEC_ASSIGN_OR_RETURN(bool carries, CurrentThreadCarries());
  if (!carries) {
    return absl::FailedPreconditionError(
        "CoreSchedCookie::ShareTo: the calling thread does not carry the cookie; "
        "call JoinCurrentThread first");
  }
  if (int err = ops_->ShareTo(pid, scope); err != 0) return SchedCoreErrno("SHARE_TO", err);
  return absl::OkStatus();
}

}  // namespace dsec::sched
