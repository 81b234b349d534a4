// SPDX-License-Identifier: Apache-2.0
// The container sandbox's PID 1, the program `dsec-sandbox-init`
// (init_main.cc; started by init_launch.h): builds the root, locks itself
// down, then starts the sandbox's exec processes on the runtime's request
// and reaps every process of the sandbox.
//
// Why the init starts execs: a process it clones is born in the sandbox's
// namespaces and cgroups and inherits its lockdown (capabilities,
// no_new_privs, rlimits, the seccomp filter), so an exec costs no cgroup
// migration (a cgroup v1 `cgroup.procs` write waits for an RCU grace
// period), no setns() and no seccomp load (~0.1-0.2 ms here: the kernel
// JIT-compiles each filter it attaches). Before, a per-sandbox helper (a
// fork of the runtime kept in the cgroups) did this, at the price of a
// second process per sandbox and its own lockdown per exec.
//
// What it trusts: the exec process's exit status now comes from the init,
// so the init must not be reachable from the sandbox's own processes,
// which share its uid and capabilities: it is not dumpable (no
// /proc/1/mem, /proc/1/fd or ptrace access from inside, none of which
// CAP_SYS_PTRACE-less processes get on a non-dumpable task), ignores every
// signal it has no use for (all blocked; SIGCHLD read from a signalfd),
// and reads only the runtime's end of a socketpair. An exec process is a
// vfork-style clone sharing the init's memory until it execs: it writes
// only its own stack, and the init installs no signal handlers, so none
// can run in that window.
#pragma once

#include <cstdint>

#include "sandbox/container/child_process.h"
#include "sandbox/container/seccomp_policy.h"

namespace dsec::container {

struct InitPlan {
  RootPlan root;         // merged, hostname, report_fd (binds unused)
  const SeccompProgram* seccomp = nullptr;
  uint64_t nofile = 1024;  // RLIMIT_NOFILE of the sandbox's processes (core is 0)
  int go_fd = -1;          // read end: the runtime has put us in the cgroups
  int report_fd = -1;      // write end: one ChildError (step 0 = ready)
  int control_fd = -1;     // the init's end of the control socketpair (init_protocol.h)
  // A fresh network namespace to join first (netns_pool.h); -1: the init
  // was cloned with CLONE_NEWNET.
  int net_fd = -1;
};

// Body of the sandbox's PID 1 (in new mount, pid, uts, ipc and net
// namespaces; the net one joined from plan.net_fd when given), with every
// signal blocked from the start (init_launch.h): builds the
// root (BuildSandboxRoot), resets every signal disposition and blocks all
// signals, sets RLIMIT_NOFILE/RLIMIT_CORE, makes itself non-dumpable,
// drops privileges, reports ready, then serves exec requests on
// plan.control_fd and reaps every child until killed. Never returns.
[[noreturn]] void RunInit(const InitPlan& plan);

}  // namespace dsec::container
