// SPDX-License-Identifier: Apache-2.0
// Running host programs (mkfs.erofs, tar, modprobe, the build scripts, the
// monitor binary a benchmark measures, crun): argv, never a shell; the
// environment, working directory and standard streams chosen by the caller;
// output captured (bounded) or passed on; an optional deadline after which
// the child is killed. The one spawner of the tree: its callers differ only
// in the options they pass. While it runs, its captured output, deadline
// and kill go through the exec pump (base/exec_pump.h), the one I/O loop
// of a running command: this class adds how a host program starts, how its
// exit is learnt (its pidfd) and what is kept of its output (a tail).
//
// Not for sandbox processes: the tiers start those with their own clone
// (namespaces, seccomp, an init) and drive the exec pump themselves.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/scoped_fd.h"

namespace dsec {

// Where one of a child's standard streams goes.
class Stdio {
 public:
  enum class Kind {
    kNull,     // /dev/null
    kInherit,  // this process's stream of the same number
    kCapture,  // a pipe read by Subprocess::Wait (stdout and stderr only)
    kFd,       // `fd` (still owned by the caller; it may be closed once spawned)
    kFile,     // `path`, created or truncated (mode 0644; stdin: opened to read)
    kStdout,   // stderr only: wherever stdout goes (2>&1)
  };
  Kind kind = Kind::kNull;
  int fd = -1;
  std::string path;

  static Stdio Null() { return {}; }
  static Stdio Inherit() { return Of(Kind::kInherit); }
  static Stdio Capture() { return Of(Kind::kCapture); }
  static Stdio Fd(int fd) {
    Stdio s = Of(Kind::kFd);
    s.fd = fd;
    return s;
  }
  static Stdio File(std::string path) {
    Stdio s = Of(Kind::kFile);
    s.path = std::move(path);
    return s;
  }
  static Stdio SameAsStdout() { return Of(Kind::kStdout); }

 private:
  static Stdio Of(Kind kind) {
    Stdio s;
    s.kind = kind;
    return s;
  }
};

struct SpawnOptions {
  // argv[0] is a path, or a name looked up in PATH.
  std::vector<std::string> argv;
  // The child's environment: this process's with `env`'s NAME=VALUE entries
  // added (replacing entries of the same name; a bare NAME removes one)
  // when `inherit_env`; else `env` alone, plus this process's PATH when
  // `env` has none (so that a helper named without a path is still found).
  bool inherit_env = true;
  std::vector<std::string> env;
  std::string cwd;  // "" = this process's
  Stdio in = Stdio::Null();
  Stdio out = Stdio::Null();
  Stdio err = Stdio::Null();
  // Per captured stream: its last this many bytes are kept (an error
  // message is at the end of a tool's output).
  size_t capture_max_bytes = 1 << 20;
  // Run the child in a session (and process group) of its own, so that a
  // signal to the caller's group does not reach it.
  bool new_session = false;
  // Before exec: enter this mount namespace (setns CLONE_NEWNS), then write
  // "0" to each of these cgroup.procs files (a cgroup v1 memory limit
  // charges the child from its first page). Either makes the spawn a fork
  // of this process rather than posix_spawn's vfork-style clone: use them
  // in benchmarks and tools, not in a large daemon.
  int mount_ns_fd = -1;
  std::vector<std::string> join_cgroup_procs;
  // Fork even without those steps: for a benchmark that times several
  // programs spawn to reap and must start them all the same way.
  bool force_fork = false;
  // RunSubprocess only: SIGKILL the child once this many milliseconds have
  // passed since the spawn (< 0: no deadline).
  int64_t timeout_ms = -1;
};

// How a child ended, and what it printed.
struct SubprocessResult {
  int wait_status = 0;     // as from wait4
  int exit_code = -1;      // valid when signal == 0
  int signal = 0;          // terminating signal, 0 if it exited
  bool timed_out = false;  // killed because the deadline passed
  std::string out, err;    // captured streams (the last capture_max_bytes)
  // Bytes the child (and its waited-for descendants) caused to be written
  // to storage: wait4's ru_oublock (512-byte units, from the task I/O
  // accounting write_bytes).
  uint64_t write_bytes = 0;
  uint64_t peak_rss_kib = 0;  // ru_maxrss
  int64_t spawn_ns = 0;       // CLOCK_MONOTONIC just before the spawn
  int64_t exit_ns = 0;        // CLOCK_MONOTONIC when it was reaped

  bool ExitedWith(int code) const { return signal == 0 && !timed_out && exit_code == code; }
  bool Succeeded() const { return ExitedWith(0); }
  double WallMs() const { return static_cast<double>(exit_ns - spawn_ns) / 1e6; }
  // "exited 1: <stderr tail>", "killed by signal 9" (", timed out").
  std::string Describe() const;
};

// A started child, owned until it is reaped: the destructor kills
// (SIGKILL) and reaps one still running, so that no early return leaves a
// process behind. Move-only. Threads: one owner thread.
class Subprocess {
 public:
  // InvalidArgument for an empty argv; the errno of a program that cannot
  // be run (NotFound, PermissionDenied) naming it.
  static absl::StatusOr<Subprocess> Spawn(const SpawnOptions& options);

  Subprocess() = default;
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // Readable once the child has exited: poll several at once, then Wait()
  // (which no longer blocks) on those that are.
  int pidfd() const { return pidfd_.get(); }
  // Spawned and not yet reaped.
  bool running() const { return pid_ > 0; }

  // Reads captured output until the child has exited and its pipes are at
  // EOF, then reaps it. With `timeout_ms` >= 0 the child is killed
  // (SIGKILL) when that many ms have passed since this call (the result
  // says timed_out), and pipes that its descendants hold open after its
  // exit are read for at most that long again.
  absl::StatusOr<SubprocessResult> Wait(int64_t timeout_ms = -1);
  // Without blocking: the result once the child has exited (then reaped,
  // with what its pipes hold), nullopt while it runs. Captured output is
  // read only then, or by Wait: a child that writes more than a pipe holds
  // (64 KiB) before it exits needs Wait.
  absl::StatusOr<std::optional<SubprocessResult>> Poll();
  // Sends `sig` through the child's pidfd (never to a recycled pid). OK if
  // it is gone already; nothing once reaped.
  absl::Status Signal(int sig);

 private:
  void TakeFrom(Subprocess& other);
  void Kill();  // SIGKILL and reap, if running
  // Runs the exec pump over the captured pipes until the child has exited
  // (killed at `deadline_ns`) and its pipes are read (at most
  // `drain_after_exit_ns` past the exit), then reaps it.
  absl::StatusOr<SubprocessResult> Finish(int64_t deadline_ns, int64_t drain_after_exit_ns);
  SubprocessResult Reaped(int status, const struct rusage& usage);

  pid_t pid_ = -1;
  ScopedFd pidfd_;
  ScopedFd out_, err_;  // captured streams, until the pump takes them
  size_t capture_max_bytes_ = 0;
  int64_t spawn_ns_ = 0;
  bool timed_out_ = false;
  std::string out_text_, err_text_;
};

// Spawn, then Wait(options.timeout_ms). Errors only when the child cannot be
// started; how it ended is in the result.
absl::StatusOr<SubprocessResult> RunSubprocess(const SpawnOptions& options);
// RunSubprocess, and Internal naming the program and how it ended (its
// stderr tail when captured) unless it exited with 0.
absl::StatusOr<SubprocessResult> RunSubprocessChecked(const SpawnOptions& options);

}  // namespace dsec
