// SPDX-License-Identifier: Apache-2.0
// Running one command in a live container sandbox: the process is started
// in the sandbox's namespaces and cgroups, and its output is read on the
// runtime side through the cap and rate limit.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/container/cgroups.h"
#include "base/clock.h"
#include "base/exec_control.h"
#include "base/exec_pump.h"
#include "base/scoped_fd.h"

namespace dsec::container {

// Output as it is read: `stream` is 1 (stdout) or 2 (stderr), `bytes` the
// piece the OutputLimiter just admitted (dropped bytes never reach it).
using OutputCallback = std::function<void(int stream, std::string_view bytes)>;

struct ExecOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH unless it has a '/'
  std::vector<std::string> env;   // KEY=VALUE; empty = the sandbox's default env
  std::string cwd = "/";
  std::string stdin_data;          // written to stdin, which is then closed
  int64_t timeout_ms = 30000;      // the whole process group and strays are killed after it
  uint64_t output_cap_bytes = 1 << 20;   // stdout + stderr kept at most; 0 = no cap
  uint64_t output_rate_bytes_per_s = 0;  // token bucket over both; 0 = no limit
  uid_t uid = 0;
  gid_t gid = 0;
  // When the command exits, what is left of its process group (background
  // jobs of a shell, a fork bomb) is killed, like a session hang-up.
  // Processes that left the group (setsid) live on until the sandbox is
  // reset or destroyed, or a later exec times out.
  bool kill_group_on_exit = true;
  // Optional: called with each admitted piece of output, in order, as soon
  // as it is read, before the piece is also kept in the result. It runs on
  // the exec's thread inside its read loop, so the timeout, the kill and
  // stdin wait while it runs: it must return promptly (buffer with a bound
  // or drop; never block on a client). `bytes` is valid during the call.
  OutputCallback on_output;
  // Optional: called once, on the exec's thread, when the init reports the
  // process made (before any output is read).
  std::function<void()> on_spawned;
  // Optional: stdin streamed after the start (with control->stdin_open(),
  // stdin stays open after stdin_data until the control closes it) and
  // signals to this command's process group; SIGKILL ends it as the
  // timeout does. Served from the process's start to its end.
  std::shared_ptr<ExecControl> control;
  // Not a command: a copy of the sandbox's init (init_protocol.h
  // kExecCopyStdinToStdout) writes stdin_data to this descriptor of the
  // caller's, which becomes its stdout, and exits 0, or with the errno of
  // the write that failed. What the writes allocate (a file's pages in
  // the sandbox's writable layer) is charged to the sandbox's memory
  // cgroup. argv names it (messages only).
  int copy_to_fd = -1;
};

struct ExecResult {
  std::optional<int> exit_code;  // set if the process exited
  std::optional<int> signal;     // set if a signal killed it
  bool timed_out = false;
  bool oom_killed = false;  // the sandbox's memory cgroup OOM-killed something during the exec
  std::string stdout_data;
  std::string stderr_data;
  uint64_t output_dropped_bytes = 0;  // over the cap or the rate, read and discarded (both streams)
  uint64_t stdout_dropped = 0;        // the part of output_dropped_bytes read from stdout
  uint64_t stderr_dropped = 0;        // ... and from stderr
  int64_t wall_ns = 0;
  uint64_t peak_rss_bytes = 0;                  // the exec process's own (rusage)
  std::optional<uint64_t> cgroup_peak_bytes;    // the sandbox's memory high-water mark
  int stray_processes_killed = 0;               // after a timeout, outside the group too
  // Shell-style status: exit code, or 128 + signal.
  int status() const { return exit_code ? *exit_code : 128 + signal.value_or(0); }
};

// What the execs of one sandbox share, for running at once: a request to
// the init and its answer go under `mu` (init_protocol.h), and `running`
// counts the execs between their request and their end.
struct ExecShared {
  std::timed_mutex mu;
  uint32_t next_seq = 0;  // guarded by mu
  std::atomic<int> running{0};
};

// What an exec needs from its sandbox. Owned by the Sandbox; valid while
// the sandbox's init lives.
struct ExecTarget {
  const ContainerCgroups* cgroups = nullptr;
  pid_t init_pid = 0;
  int init_control_fd = -1;  // the runtime's end of the init's control socket (init_protocol.h)
  const std::vector<std::string>* default_env = nullptr;
  // Null: the caller runs one exec at a time on this target.
  ExecShared* shared = nullptr;
  // The command's time (its timeout, its reported duration): the sandbox's
  // PausableClock, which stands still while the sandbox is paused. Null:
  // CLOCK_MONOTONIC.
  const Clock* clock = nullptr;
};

// Execs one sandbox runs at once at most (its init tracks each one's
// report pipe); one more is ResourceExhausted.
inline constexpr int kMaxConcurrentExecs = 32;

// Runs `options` in `target`: the sandbox's init starts the process
// (init_process.h), so it is born in the sandbox's namespaces and cgroups
// with the init's lockdown. Errors: InvalidArgument (empty argv, NUL bytes,
// too large), NotFound or PermissionDenied (execve failed in the sandbox),
// ResourceExhausted (the pids limit refused the process),
// FailedPrecondition (the init is gone), Internal (syscalls).
// ResourceExhausted: kMaxConcurrentExecs already run in the sandbox.
// Threads: any thread; blocks until the command finishes or times out.
// Several execs of one target run at once when it has `shared`. A timeout
// kills the command's process group; the sandbox's other processes
// (strays that left the group: setsid, double forks) only when no other
// exec of the sandbox runs, since they may be that exec's. A SIGKILL
// through ExecOptions::control kills the command's process group only.
absl::StatusOr<ExecResult> RunExec(const ExecTarget& target, const ExecOptions& options);

// write(2) to a pipe whose reader may be gone, without SIGPIPE (the exec
// pump's; sandbox.cc and init_pool.cc use it for the init's pipes).
using dsec::WriteNoSigpipe;

}  // namespace dsec::container
