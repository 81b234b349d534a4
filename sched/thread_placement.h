// SPDX-License-Identifier: Apache-2.0
// Applying a placement to a thread: the call a monitor's vCPU thread (or a
// container's process before exec) makes before it runs sandbox code.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sched/core_sched.h"
#include "sched/sandbox_cgroup.h"

namespace dsec::sched {

// What one thread of a sandbox should be given. The pointers, if set, must
// outlive the call (they belong to the sandbox's SandboxIsolation).
struct ThreadPlacement {
  std::vector<int> cpus = {};              // affinity; empty = leave unchanged
  const CoreSchedCookie* cookie = nullptr;  // core-scheduling mechanism
  const SandboxCgroup* cgroup = nullptr;    // cpuset-partitioning mechanism
};

// Places the calling thread: joins the cgroup (first, because a v1 cpuset
// attach rewrites the thread's affinity to the whole cpuset), then sets the
// affinity, then joins the cookie. Call it on the thread itself before it
// first enters the guest (KVM_RUN) or execs sandbox code. Errors keep their
// codes (PermissionDenied, Unavailable, InvalidArgument for CPUs the
// thread may not use); on error the thread may be partially placed and
// must not run sandbox code.
absl::Status ApplyToCurrentThread(const ThreadPlacement& placement);

// sched_getaffinity / sched_setaffinity for the calling thread.
absl::StatusOr<std::vector<int>> CurrentThreadAffinity();
absl::Status SetCurrentThreadAffinity(const std::vector<int>& cpus);

// gettid(2).
pid_t CurrentThreadId();

}  // namespace dsec::sched
