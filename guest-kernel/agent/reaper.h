// SPDX-License-Identifier: Apache-2.0
// PID 1's reaper: one thread reaps every child with wait4(-1) (orphans are
// re-parented to PID 1 and must not pile up as zombies), and hands the exit
// status of the children the agent spawned itself to their owners.
//
// Why registered children cannot lose their status: Spawn holds the registry
// lock from before fork() until the new pid is registered, and the reaper
// takes the same lock after wait4() returns a pid and before it decides
// whether anyone owns it. A child that exits instantly is therefore either
// found registered or not yet reaped.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "guest-kernel/agent/child.h"
#include "base/scoped_fd.h"

namespace dsec::agent {

// Threads: Run() on one dedicated thread; Spawn() from any thread; the
// Children it returns are used by one owner thread each.
// Requirement: SIGCHLD is blocked in every thread of the process (block it
// in main() before any thread starts), so that it queues for the signalfd.
class Reaper : public ChildLauncher {
 public:
  static absl::StatusOr<std::unique_ptr<Reaper>> Create();
  ~Reaper() override;

  // Reaps until `stop_fd` (if >= 0) becomes readable; with -1, forever.
  void Run(int stop_fd = -1);

  absl::StatusOr<std::unique_ptr<Child>> Spawn(const SpawnSpec& spec) override;

  // Children reaped that nobody had registered (orphans).
  uint64_t orphans_reaped() const;

  struct Entry;  // per registered child (reaper.cc)

 private:
  explicit Reaper(ScopedFd signal_fd) : signal_fd_(std::move(signal_fd)) {}
  friend class ReaperChild;

  void ReapAll();

  ScopedFd signal_fd_;
  mutable absl::Mutex mu_;
  std::map<pid_t, std::shared_ptr<Entry>> registered_ ABSL_GUARDED_BY(mu_);
  uint64_t orphans_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dsec::agent
