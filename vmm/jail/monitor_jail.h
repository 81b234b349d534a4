// SPDX-License-Identifier: Apache-2.0
// The monitor's jail: once the VM is built (every file and device open) and
// its threads are started, the monitor drops to a uid/gid of its own with no
// capabilities, and every thread installs its seccomp filter before it does
// guest-facing work (a vCPU thread before its first KVM_RUN).
//
// Order, and why: the threads start first and wait at a gate (EnterThread);
// the main thread (Lock) then drops the privileges for the whole process
// (glibc signals every thread to change its credentials, which a thread that
// already had a filter could not do), installs its own filter and opens the
// gate; each waiting thread then installs its kind's filter and goes on.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "vmm/jail/privileges.h"
#include "vmm/jail/seccomp_filters.h"

namespace dsec::jail {

// Sanitizer runtimes make system calls of their own: log, not kill, there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr SeccompMode kDefaultSeccompMode = SeccompMode::kLog;
#else
inline constexpr SeccompMode kDefaultSeccompMode = SeccompMode::kKill;
#endif

struct JailOptions {
  std::optional<uid_t> uid;  // with gid: drop to them; neither: keep the credentials
  std::optional<gid_t> gid;
  SeccompMode seccomp = kDefaultSeccompMode;
  // What the VM's devices add to the threads' lists (the monitor fills it
  // from the device kinds of its configuration).
  FilterExtras extras;
  // For tests (the hidden --test-hook flag):
  //   syscall:KIND  a KIND thread (main, vcpu, event-loop, control, reclaim)
  //                 makes a call outside its list (getppid) once filtered
  //   open:PATH     the main thread opens PATH read-only once jailed and
  //                 prints the result on stderr
  std::vector<std::string> test_hooks;
};

// InvalidArgument naming the bad hook, or uid without gid (or the reverse),
// or a uid/gid of 0, or an extra CheckFilterExtras refuses.
absl::Status ValidateJailOptions(const JailOptions& options);

class MonitorJail {
 public:
  explicit MonitorJail(JailOptions options) : options_(std::move(options)) {}

  // On a monitor thread as it starts: waits for Lock(), then installs the
  // kind's filter. Returns Lock's error if the jail could not be set up (the
  // thread must then stop without serving).
  absl::Status EnterThread(ThreadKind kind);

  // On the main thread once the VM's threads are started: waits until
  // `expected_threads` threads wait in EnterThread (or `abort_fd`, the VM's
  // stop eventfd, is readable: a thread failed before reaching the gate),
  // checks that the process has no other thread, disables core dumps, drops
  // the privileges, installs the main thread's filter and opens the gate.
  absl::Status Lock(int expected_threads, int abort_fd);

  // Opens the gate with an error instead (set-up failed before Lock): the
  // waiting threads return it and end, so that they can be joined.
  void Abort(const absl::Status& why);

  // The credentials Lock left (for the stats and tests).
  const Credentials& credentials() const { return credentials_; }

 private:
  absl::Status LockLocked(int expected_threads, int abort_fd);
  void RunHooks(ThreadKind kind) const;

  const JailOptions options_;
  Credentials credentials_;
  absl::Mutex mu_;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status gate_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dsec::jail
