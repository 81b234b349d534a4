// SPDX-License-Identifier: Apache-2.0
// Starting a container sandbox's PID 1 as its own small program.
//
// Why not a fork of the runtime: fork copies the runtime's page tables and
// makes every page it writes afterwards a copy-on-write fault, and the
// init's exit tears the copy down again. Measured here (PVM, where page
// table work is slow): from a process with 10 MiB touched, fork to a
// ready child 0.41-0.53 ms and its kill to reap 0.43-0.46 ms; with 40 MiB,
// 0.96 and 1.25 ms. A vfork-style clone that execs a 0.8 MB static binary:
// 0.44-0.49 ms to ready whatever the runtime's size, 0.08-0.12 ms to reap.
// The daemon's heap grows with its sandboxes; the init's cost should not.
// The init also no longer holds a copy of the runtime's memory (other
// sandboxes' output buffers, an API token).
//
// The clone (init_trampoline.h) is made by a launcher: `dsec-sandbox-init
// --staged-launcher` (inits in new mount namespaces; see the stage there)
// or `--launcher` (user-namespace inits), started by this process on first
// use, which clones with
// CLONE_VM | CLONE_VFORK | CLONE_PARENT and the sandbox's new namespaces.
// Why not the runtime itself: a clone copies the caller's descriptor
// table, and the runtime holds descriptors for every live sandbox; the
// child then closes all of them again before execve. Measured here at
// about 9,000 live sandboxes (docs/benchmarks.md): 17% of all CPU time of
// a create ramp went to that copy and those closes. A launcher holds at
// most seven descriptors, so a launch costs the same at 10 sandboxes as
// at 10,000. CLONE_PARENT makes the init this process's child, as before
// (it waits for it by pidfd). The child, sharing the launcher's memory
// until execve, only arranges descriptors (init_protocol.h: kInitConfigFd
// ...) and execs `dsec-sandbox-init` with every signal blocked (the init
// keeps them blocked). The configuration goes through a pipe written
// before the clone.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "sandbox/container/init_protocol.h"
#include "base/scoped_fd.h"

namespace dsec::container {

// The sandbox init binary: `configured` if set; else $DSEC_SANDBOX_INIT;
// else `dsec-sandbox-init` next to this process's executable; else the one
// this build made. Unavailable (naming where it looked) if none is an
// executable file.
absl::StatusOr<std::string> FindSandboxInit(const std::string& configured);

struct InitFds {
  int go_read = -1;       // becomes kInitGoFd
  int report_write = -1;  // becomes kInitReportFd
  int control = -1;       // becomes kInitControlFd
  int netns = -1;         // becomes kInitNetnsFd when config.join_netns
  int userns = -1;        // becomes kInitUsernsFd when config.join_userns
};

// The runtime's channels to one init: the go pipe (the runtime writes once
// the init is in its cgroups), the report pipe (ChildError records) and the
// control socketpair. All close-on-exec; LaunchInit moves the init's ends.
struct InitChannels {
  static absl::StatusOr<InitChannels> Create();
  // The init's ends, for LaunchInit (netns/userns left to the caller).
  InitFds fds() const;
  // Closes the init's ends once it holds its own copies.
  void CloseInitEnds();

  ScopedFd go_read, go_write;
  ScopedFd report_read, report_write;
  ScopedFd control_ours, control_init;
};

struct LaunchedInit {
  pid_t pid = 0;  // host view; with config.join_userns the process that forks PID 1
  ScopedFd pidfd;
  // With a deferred config (LaunchInit's `config` null): the pipe the init
  // reads it from, for EncodeInitConfig's bytes later (init_pool.h).
  ScopedFd config_write;
};

// Clones with `clone_flags` (CLONE_NEW* only) and execs `binary` as the
// sandbox's PID 1 with `config` on kInitConfigFd (null: the init waits
// for it on LaunchedInit::config_write). Returns once the child has exec'd
// (or died trying: an execve failure arrives as a ChildError on the report
// pipe, like the init's own). Errors: InvalidArgument (a config field out
// of bounds), Internal (pipe, clone).
// Also the launcher's errors: it could not be started (the errno's
// status, naming the step) or died while asked (Internal); the next
// launch starts another.
// Threads: any; launches of one process are serialised through its
// launcher, each for the clone and exec.
absl::StatusOr<LaunchedInit> LaunchInit(const std::string& binary, const InitConfig* config,
                                        const InitFds& fds, uint64_t clone_flags);
// The pid of this process's launcher of `binary` (0: none yet), the staged
// one (init_trampoline.h) or the other, for tests.
pid_t InitLauncherPid(const std::string& binary, bool staged = true);
// What the deferred config must satisfy (LaunchInit checks a given one).
absl::Status ValidateInitConfig(const InitConfig& config);

// Before an init's go: out of reach of its memory cgroup's OOM killer
// (oom_score_adj -1000, set with the runtime's CAP_SYS_RESOURCE, which
// also lets the init itself move between -1000 and 0). The init gives each
// process it starts 0 (init_process.cc), so a sandbox that fills its
// memory loses the process that did, never its init and with it every
// process and the control channel. Without CAP_SYS_RESOURCE (refused with
// EACCES) the init stays at 0: logged once, then not tried again, OK.
// Errors: the init gone.
absl::Status ShieldInitFromOom(pid_t init_pid);

}  // namespace dsec::container
