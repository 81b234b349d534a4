// SPDX-License-Identifier: Apache-2.0
// Code that runs in freshly cloned children of the runtime: the sandbox's
// init and the two steps of an exec. The runtime may be multi-threaded, so
// everything here is async-signal-safe: plans are built (all strings and
// arrays allocated) before the clone, the children only make syscalls.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sandbox/container/seccomp_policy.h"

namespace dsec::container {

// A failure in a child, reported over a pipe: which step and errno.
struct ChildError {
  int32_t step = 0;
  int32_t err = 0;
};
// Human-readable name of an init or exec step.
const char* ChildStepName(int32_t step);

// Capabilities a sandbox process keeps (Docker's default set without
// MKNOD, NET_RAW and AUDIT_WRITE): CHOWN, DAC_OVERRIDE, FOWNER, FSETID,
// KILL, SETGID, SETUID, SETPCAP, NET_BIND_SERVICE, SYS_CHROOT, SETFCAP.
uint64_t SafeCapabilities();

struct InitPlan {
  std::string merged;    // the overlay, becomes "/"
  std::string hostname;
  uint64_t dev_shm_bytes = 64ull << 20;
  const SeccompProgram* seccomp = nullptr;
  int go_fd = -1;      // read end: the runtime has put us in the cgroups
  int report_fd = -1;  // write end: one ChildError (step 0 = ready)
  // A fresh network namespace to join first (netns_pool.h); -1: the init
  // was cloned with CLONE_NEWNET.
  int net_fd = -1;
};

// Body of the sandbox's PID 1 (in new mount, pid, uts, ipc and net
// namespaces; the net one joined from plan.net_fd when given): unshares the cgroup namespace, builds /dev, pivots into the
// overlay, mounts /proc (masked) and /sys (read-only, firmware hidden),
// sets the hostname, brings lo up, drops privileges, reports ready, then
// reaps zombies until killed. Never returns.
[[noreturn]] void RunInit(const InitPlan& plan);

struct ExecPlan {
  std::vector<int> ns_fds;            // setns order: net, uts, ipc, cgroup, pid, mnt
  std::vector<std::string> argv;      // argv[0] as given
  std::vector<std::string> env;       // KEY=VALUE
  std::vector<std::string> exec_paths;  // candidate paths for argv[0]
  std::string cwd = "/";
  uid_t uid = 0;
  gid_t gid = 0;
  uint64_t nofile = 1024;
  const SeccompProgram* seccomp = nullptr;
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;
  int pid_report_fd = -1;  // write end: the exec process's host pid (int32)
  int go_fd = -1;          // read end: the runtime has put it in the cgroups
  int error_fd = -1;       // write end, close-on-exec: ChildError if exec fails
  // NULL-terminated arrays over argv/env, built by Finalize() before fork.
  std::vector<char*> argv_c, env_c;
  void Finalize();
};

// Runs in a child forked from the runtime: joins the sandbox's namespaces,
// clones the exec process as a sibling (CLONE_PARENT, so the runtime can
// wait for it), reports its pid and exits. The exec process waits for the
// go byte, then: new session, stdio, cwd, rlimits, capabilities,
// no_new_privs, seccomp, execve. Never returns.
[[noreturn]] void RunExecLauncher(const ExecPlan& plan);
// The exec process's part of RunExecLauncher, for a process already in the
// sandbox's namespaces: waits for the go byte (unless go_fd < 0), then
// new session, stdio, cwd, rlimits, lockdown, execve. Never returns.
[[noreturn]] void RunExecProcess(const ExecPlan& plan);


// --- Shared with other tiers (sandbox/fncall) ------------------------------

// Reports `step`/`err` as a ChildError on `fd` and exits the child (127).
[[noreturn]] void FailChild(int fd, int32_t step, int err);

struct RootPlan {
  std::string merged;  // directory that becomes "/" (a mount point)
  std::string hostname;
  // Host directories bound (recursively, nosuid, nodev) onto paths relative
  // to the new root once /dev is built, before pivot_root.
  std::vector<std::pair<std::string, std::string>> binds;
  bool read_only_dev = false;  // remount /dev read-only once built
  int report_fd = -1;          // ChildError on failure
};

// The root-building part of RunInit, for a process already in new mount,
// pid, uts, ipc and net namespaces and in its cgroups: unshares the cgroup
// namespace, makes mounts private, builds /dev, applies `binds`, pivots into
// `merged`, mounts the masked /proc and read-only /sys, sets the hostname
// and brings lo up. Async-signal-safe; on failure reports and exits.
void BuildSandboxRoot(const RootPlan& plan);

// Drops capabilities to SafeCapabilities(), takes uid/gid if non-zero, sets
// no_new_privs and loads `seccomp` (if set). 0 or an errno; `*step` names
// the step that failed. Async-signal-safe.
int LockDownProcess(const SeccompProgram* seccomp, uid_t uid, gid_t gid, int32_t* step);

}  // namespace dsec::container
