// SPDX-License-Identifier: Apache-2.0
// Spawning the processes the agent runs, and learning when they end without
// stealing anyone else's exit status.
//
// Two launchers:
//  - PidfdLauncher (host mode, and any process that is not PID 1): waits for
//    its own children by pidfd and reaps them by pid; it never calls
//    wait(-1), so other children of the process are left alone.
//  - Reaper (reaper.h, guest mode as PID 1): PID 1 must reap every orphan,
//    so one thread calls wait4(-1) and hands the status of registered
//    children to their owners.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::agent {

struct SpawnSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "KEY=VALUE"
  // PATH used to find argv[0] when it has no '/' (not the child's PATH
  // unless the caller passes that).
  std::string search_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  std::string cwd;  // empty: inherit
  // Descriptors for the child's 0, 1, 2 (-1: inherit).
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // setsid(): the child leads a new session and process group.
  bool new_session = true;
};

struct ChildStatus {
  std::optional<int> exit_code;
  std::optional<int> signal;
  int64_t maxrss_kib = 0;
};

// One spawned process. Threads: one owner thread.
class Child {
 public:
  virtual ~Child() = default;
  virtual pid_t pid() const = 0;
  // Readable once the child has exited.
  virtual int wait_fd() const = 0;
  // The exit status if the child has exited (it is then reaped and the
  // handle spent); nullopt while it runs.
  virtual absl::StatusOr<std::optional<ChildStatus>> TryCollect() = 0;
  // True while the pid cannot have been reused (not reaped yet).
  virtual bool Unreaped() const = 0;
};

// Threads: Spawn may be called from any thread.
class ChildLauncher {
 public:
  virtual ~ChildLauncher() = default;
  // Forks and execs. Errors from exec itself (not found, not executable,
  // bad cwd) are returned as a Status; the failed child is reaped.
  virtual absl::StatusOr<std::unique_ptr<Child>> Spawn(const SpawnSpec& spec) = 0;
};

class PidfdLauncher : public ChildLauncher {
 public:
  absl::StatusOr<std::unique_ptr<Child>> Spawn(const SpawnSpec& spec) override;
};

namespace internal {

// Everything the forked child needs, prepared before fork() so that the
// child only makes async-signal-safe calls.
class PreparedSpawn {
 public:
  explicit PreparedSpawn(const SpawnSpec& spec);
  // In the child: sets up and execs; on failure writes errno to `err_fd`
  // and _exits(127). Never returns.
  [[noreturn]] void ExecInChild(int err_fd) const;

 private:
  const SpawnSpec& spec_;
  std::vector<std::string> candidates_;
  std::vector<char*> argv_;
  std::vector<char*> envp_;
};

// Reads the exec error pipe (the child's end closed): 0 if exec succeeded,
// else the child's errno.
int ReadExecError(int err_read_fd);

// ChildStatus from a wait status and rusage.
ChildStatus StatusFromWait(int wait_status, long maxrss_kib);

}  // namespace internal

}  // namespace dsec::agent
