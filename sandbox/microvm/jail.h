// SPDX-License-Identifier: Apache-2.0
// Starting one jailed process (a dsec-vmm monitor, or the host-mode agent
// stand-in of the tests) and owning it until it is reaped: clone3 into new
// namespaces with a pidfd, join the caller's cgroups before the child runs,
// carry out a list of mount steps in the child's own mount namespace (so
// every mount dies with the process), drop privileges, execve.
//
// The clone runs on one long-lived thread of the process (never exits), so
// that PR_SET_PDEATHSIG — which fires when the *thread* that created the
// child ends — means "when the daemon dies", not "when the HTTP worker that
// served the create ends". A fork()ed child of the process that starts
// jailed processes itself gets a spawner thread of its own (pthread_atfork).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sandbox/container/cgroups.h"
#include "base/scoped_fd.h"

namespace dsec::microvm {

// One filesystem step the child takes, in order, after it was released and
// before it drops privileges. Paths are as the child sees them at that step.
struct MountStep {
  enum class Kind {
    kMkdir,    // mkdir(target, mode); an existing directory is fine
    kTouch,    // create an empty file at target (a bind-mount point)
    kMount,    // mount(source, target, fstype, flags, data)
    kSymlink,  // symlink(source, target)
    kPivot,    // chdir(target), pivot_root(".", "."), detach the old root
  };
  Kind kind = Kind::kMkdir;
  std::string source;
  std::string target;
  std::string fstype;
  std::string data;
  unsigned long flags = 0;
  unsigned mode = 0755;

  static MountStep Mkdir(std::string target, unsigned mode = 0755);
  static MountStep Touch(std::string target);
  static MountStep Mount(std::string source, std::string target, std::string fstype,
                         unsigned long flags, std::string data = "");
  static MountStep Bind(std::string source, std::string target, bool recursive = false);
  // MS_REMOUNT | MS_BIND | flags (e.g. MS_RDONLY | MS_NOSUID | MS_NODEV).
  static MountStep Remount(std::string target, unsigned long flags);
  static MountStep Symlink(std::string link_target, std::string path);
  static MountStep Pivot(std::string new_root);
};

// mkdir steps for every component of `dir` below `root` (root + dir, dir
// absolute), e.g. root="/j", dir="/a/b" -> /j/a, /j/a/b.
std::vector<MountStep> MkdirAllSteps(const std::string& root, const std::string& dir);

struct JailSpec {
  // argv[0] is the path execve'd (as the child sees it after the steps).
  std::vector<std::string> argv;
  std::vector<std::string> env;  // the whole environment (KEY=VALUE)
  // CLONE_NEW* flags. Mount steps need CLONE_NEWNS.
  uint64_t namespaces = 0;
  std::vector<MountStep> steps;
  // Descriptors that become the child's 0, 1, 2 (-1: /dev/null). Only they
  // cross the execve.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // Further descriptors of the caller (3 or more) that cross the execve at
  // their own numbers, e.g. a tap the monitor takes over (devices/net's
  // tap_fd). The caller keeps them open until Start returns.
  std::vector<int> keep_fds;
  // Empties the capability bounding, inheritable and ambient sets, so the
  // program runs without capabilities even as uid 0.
  bool drop_capabilities = true;
  // With drop_capabilities: capabilities (bits 1 << CAP_*) kept in the
  // bounding, permitted and effective sets, for a program that drops them
  // itself (the monitor keeps CAP_SETUID, CAP_SETGID and CAP_SETPCAP until
  // it changes to its own uid).
  uint64_t keep_capabilities = 0;
  // Cgroups the child joins before it runs anything (nullptr: none).
  const container::ContainerCgroups* cgroups = nullptr;
  // Also called with the child's pid before it runs (e.g. the QoS
  // placement's cgroup, sched::SandboxIsolation::AddProcess).
  std::function<absl::Status(pid_t)> join;
};

// A human-readable wait status ("exited with status 2", "killed by signal 9").
std::string DescribeWaitStatus(int wait_status);

// The child, from clone to reaping. Destruction kills and reaps it.
// Threads: one owner thread (the sandbox's calls are serialised).
class JailedProcess {
 public:
  // Returns once the program was execve'd; a failure before that (a mount
  // step, the execve) is an error naming the step, and nothing is left.
  static absl::StatusOr<std::unique_ptr<JailedProcess>> Start(const JailSpec& spec);
  ~JailedProcess();
  JailedProcess(const JailedProcess&) = delete;
  JailedProcess& operator=(const JailedProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Readable once the process has exited (poll it; the pidfd).
  int exit_fd() const { return pidfd_.get(); }
  // Whether the process has exited (reaped or not); never blocks.
  bool Exited() const;
  // Waits up to timeout_ms for the process to exit, then reaps it. Returns
  // the wait status; DeadlineExceeded if it is still running.
  absl::StatusOr<int> WaitExit(int64_t timeout_ms);
  // Sends `sig` (pidfd_send_signal); OK if it is already gone.
  absl::Status Signal(int sig) const;
  // Sends `first_signal` (0: none), waits up to grace_ms, then SIGKILL;
  // reaps. Idempotent.
  absl::Status Kill(int first_signal = 0, int64_t grace_ms = 0);
  // The wait status once reaped.
  std::optional<int> wait_status() const { return wait_status_; }

 private:
  JailedProcess(pid_t pid, ScopedFd pidfd) : pid_(pid), pidfd_(std::move(pidfd)) {}
  bool Reap(int flags);

  pid_t pid_;
  ScopedFd pidfd_;
  std::optional<int> wait_status_;
};

// Waits until `fd` is readable or timeout_ms passed (-1: forever); true if
// readable. Used to wait on a pidfd between connection attempts.
bool WaitReadable(int fd, int64_t timeout_ms);

// Removes `dir` and every cgroup below it (deepest first), killing what is
// inside (container::KillAndRemoveCgroup on each).
absl::Status RemoveCgroupTree(const std::string& dir);

}  // namespace dsec::microvm
