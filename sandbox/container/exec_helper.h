// SPDX-License-Identifier: Apache-2.0
// A per-sandbox process that clones exec processes from inside the
// sandbox's cgroups, so that an exec does not migrate a process into them.
//
// Why: on cgroup v1 every write to cgroup.procs takes
// cgroup_threadgroup_rwsem for writing, which waits for an RCU grace period
// unless another migration happened within the last one (1-15 ms on a busy
// host). The helper is forked together with the sandbox's init and moved
// into the cgroups right after it (back to back: one grace period for
// both); once init has built the root, the helper setns()es into its
// namespaces. Each exec is then a request over a socket (plan + stdio and
// error fds by SCM_RIGHTS): the helper clones the exec process with
// CLONE_PARENT, so it is born in the cgroups and namespaces and is still
// the runtime's child (the runtime waits for it, reads its rusage and
// kills it as before), and runs RunExecProcess. The clone is vfork-style
// (CLONE_VM | CLONE_VFORK on a stack of the helper's, as posix_spawn):
// the helper's address space is the whole runtime's, and copying its page
// tables for a process that execs at once cost more than the rest of the
// clone (exec_helper.cc).
//
// The helper stays in the runtime's pid namespace: sandbox processes cannot
// see or signal it. It dies with the runtime (PR_SET_PDEATHSIG) and with the
// sandbox (StopInit kills and reaps it; an exec timeout's cgroup sweep kills
// it too, after which execs fall back to the fork-and-migrate launcher).
// Threads: the Sandbox's thread.
#pragma once

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "sandbox/container/child_process.h"
#include "vmm/base/scoped_fd.h"

namespace dsec::container {

class ExecHelper {
 public:
  ExecHelper() = default;
  ExecHelper(ExecHelper&& other) noexcept;
  ExecHelper& operator=(ExecHelper&& other) noexcept;
  ExecHelper(const ExecHelper&) = delete;
  ExecHelper& operator=(const ExecHelper&) = delete;
  ~ExecHelper() { Stop(); }

  // Forks the helper, which waits for Join. `seccomp` is what its exec
  // processes load (the same object in the forked address space).
  static absl::StatusOr<ExecHelper> Start(const SeccompProgram* seccomp);
  // Makes the helper join the namespaces of `init_pid` (net uts ipc cgroup
  // pid mnt, as the launcher does). Call once init has reported ready.
  absl::Status Join(pid_t init_pid);
  // Clones an exec process for `plan` (argv, env, exec_paths, cwd, uid,
  // gid, nofile and the stdin/stdout/stderr/error fds; ns_fds, go_fd and
  // pid_report_fd are not used). Returns its pid (a child of this process).
  absl::StatusOr<pid_t> Spawn(const ExecPlan& plan);
  // Kills and reaps the helper. Idempotent.
  void Stop();

  bool running() const { return pid_ > 0 && joined_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = 0;
  bool joined_ = false;
  ScopedFd pidfd_;
  ScopedFd sock_;
};

}  // namespace dsec::container
