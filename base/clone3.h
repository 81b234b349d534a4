// SPDX-License-Identifier: Apache-2.0
// clone3(2), which glibc 2.36 does not wrap: the one spelling of its
// argument struct and a fork-like call (no new stack: the child continues
// on a copy of the caller's, as after fork).
#pragma once

#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace dsec {

// struct clone_args of <linux/sched.h>, version 2 (CLONE_ARGS_SIZE_VER2, 88
// bytes), spelled here because that header collides with glibc's <sched.h>.
struct CloneArgs {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
      set_tid_size, cgroup;
};
static_assert(sizeof(CloneArgs) == 88);

// clone3 with `flags` (namespaces and the like; CLONE_PIDFD is added when
// `pidfd` is set, which then receives the child's pidfd) and SIGCHLD as the
// exit signal. Returns the child's pid in the parent, 0 in the child, -1
// with errno on failure. Not for CLONE_VM (without a stack of its own the
// child would run on the parent's very stack). Async-signal-safe.
inline long Clone3(uint64_t flags, int* pidfd) {
  CloneArgs args{};
  args.flags = flags;
  if (pidfd != nullptr) {
    args.flags |= CLONE_PIDFD;
    args.pidfd = reinterpret_cast<uint64_t>(pidfd);
  }
  args.exit_signal = SIGCHLD;
  return ::syscall(SYS_clone3, &args, sizeof(args));
}

}  // namespace dsec
