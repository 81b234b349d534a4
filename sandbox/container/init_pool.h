// SPDX-License-Identifier: Apache-2.0
// Sandbox inits made ahead of time: the slow part of a create, done while
// nobody waits.
//
// Why: a create's one cgroup v1 migration (the init's `cgroup.procs`
// write) waits for an RCU grace period unless another migration ran within
// the last one. Back to back (a benchmark loop) it rarely waits; a create
// that arrives alone, as creates on a node mostly do, waits for a whole
// one: measured here, create p50 2.2 ms back to back, 9.5-9.8 ms with 20 or
// 100 ms between creates, nearly all of it that wait. A slot is everything
// of a sandbox that does not depend on its configuration: a state
// directory (<root>/.slot-<pid>-<n>, recorded like a sandbox's, so orphan
// cleanup finds it), cgroups without limits, and an exec'd init in new
// mount, pid, uts, ipc and net namespaces, already migrated into the
// cgroups, waiting for its configuration. Sandbox::Create takes one
// (SandboxConfig::init_pool), renames the directory to the sandbox's id,
// writes the limits, and hands the init its configuration and its root
// (a detached overlay it attaches in its mount namespace, made after the
// slot was). Sandboxes with a QoS placement or a user namespace do not use
// slots (the one needs another migration, the other its own namespaces).
//
// When: a slot's migration holds cgroup_mutex through its grace period, so
// cgroup mkdirs and rmdirs of the node wait for it (measured: destroy p50
// 0.6 -> 8-11 ms when refills ran during the bench's destroys). Sandboxes
// of a pool's root therefore retire through it (Retire): their destroy
// ends once processes and mounts are gone, and the pool's thread removes
// their cgroups and state directory, ahead of any refill, when nobody
// waits for it.
//
// Retired cgroups are removed after a burst of destroys, not during it:
// once no sandbox retired for kRetireQuietMs (or the oldest waited
// kRetireMaxWaitMs, or kRetireMaxWaiting wait, or Flush or shutdown asks).
// A memory cgroup's removal walks every memory-cgroup-aware LRU list of
// the node (two per superblock: memcg_reparent_list_lrus) under a mutex
// that a superblock's teardown and creation also take; removed one by one
// while the others still stand, N sandboxes' removals cost N x N x (their
// file systems) list visits, and the destroys still under way (whose
// unmounts need that mutex) waited behind them: delete of all 10,000
// sandboxes took 78 s. Removed after the burst, when the destroyed
// sandboxes' superblocks are gone, each walk is short.
//
// Cost: an idle slot is an idle init and its cgroups and namespaces (about
// what an idle sandbox costs, bench/README.md); `target` of them per pool.
//
// Threads: Take() from any thread; the refill thread belongs to the pool
// and is joined by its destructor, which also removes every unused slot.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "sandbox/container/cgroups.h"
#include "sandbox/container/state_dir.h"
#include "base/scoped_fd.h"

namespace dsec::container {

// Waits for this process's child `pid` to exit and reaps it (EINTR retried).
void ReapChild(pid_t pid);

// One made-ahead sandbox shell. Move-only; destruction kills its init and
// removes its cgroups and directory (when Sandbox::Create has not taken
// them).
struct InitSlot {
  InitSlot() = default;
  InitSlot(InitSlot&&) noexcept = default;
  InitSlot& operator=(InitSlot&&) = delete;
  ~InitSlot();

  // Kills the init and waits for it (its namespaces go with it).
  void KillInit();

  StateDir state;
  ContainerCgroups cgroups{ContainerCgroups::Empty()};
  pid_t init_pid = 0;
  ScopedFd init_pidfd;
  ScopedFd config_write;  // the init reads its InitConfig from here
  ScopedFd control;       // the runtime's end of its control socket
  ScopedFd report_read;   // its ChildError reports
};

struct InitPoolStats {
  uint64_t made = 0;      // slots made
  uint64_t taken = 0;     // handed to a create
  uint64_t misses = 0;    // Take() found none ready
  uint64_t failures = 0;  // slots that could not be made
  uint64_t retired = 0;   // destroyed sandboxes whose remains it removed
  size_t ready = 0;       // ready now
};

class InitPool {
 public:
  // Keeps `target` slots ready under `state_root` (the sandboxes' state
  // root), their inits `init_binary` ("" = FindSandboxInit's default).
  // Unavailable if no init binary is found or no cgroup controllers are
  // usable. The first slots are made on the pool's thread.
  static absl::StatusOr<std::unique_ptr<InitPool>> Create(const std::string& state_root,
                                                          size_t target,
                                                          const std::string& init_binary = "");
  ~InitPool();
  InitPool(const InitPool&) = delete;
  InitPool& operator=(const InitPool&) = delete;

  // A ready slot, or nullopt (the caller makes its sandbox from scratch).
  std::optional<InitSlot> Take();
  // Takes over what is left of a destroyed sandbox of this root (its
  // processes are dead, its mounts gone): `state` already renamed out of
  // the way (a tombstone; orphan cleanup finds it if the runtime dies),
  // the cgroups to remove. The pool's thread removes both (see "When").
  // With `killed_init`: the sandbox's init (this process's child), sent
  // SIGKILL and not yet reaped; the pool's thread reaps it before the
  // cgroups go. Its exit (the teardown of its namespaces and mounts, each
  // unmount an RCU grace period) then runs beside the other destroys' and
  // shares their grace periods, rather than one destroy after another
  // waiting for its own.
  // `store_dir`, if any, names the sandbox's writable layer in
  // UpperStore::Default() (upper_store.h), removed once the init is reaped.
  void Retire(StateDir state, ContainerCgroups cgroups, pid_t killed_init = 0, std::string store_dir = {});
  // Removes everything retired so far, now, and waits for it (tests,
  // shutdown).
  void Flush();
  // See "Retired cgroups are removed after a burst" above.
  static constexpr int64_t kRetireQuietMs = 150;
  static constexpr int64_t kRetireMaxWaitMs = 30'000;
  static constexpr size_t kRetireMaxWaiting = 16'384;
  // Waits until `n` slots are ready or `timeout_ms` passed; whether they are.
  bool WaitReady(size_t n, int64_t timeout_ms);
  // `n` creates are coming soon (a fork's children, once their source is
  // packed): up to kMaxExpected slots beyond the target are made now, while
  // the caller does its other work, and taken by the next `n` creates.
  // Those not taken within kExpectMs are removed again (the pool goes back
  // to `target`).
  void Expect(size_t n);
  static constexpr size_t kMaxExpected = 32;
  static constexpr int64_t kExpectMs = 2'000;
  const std::string& state_root() const { return state_root_; }
  // The init binary its slots run (resolved by FindSandboxInit).
  const std::string& init_binary() const { return init_binary_; }
  InitPoolStats stats() const;
  absl::Status last_error() const;

  // A create or destroy in flight (RAII): the refill waits until none is,
  // up to 100 ms. A slot's migration holds cgroup_mutex through an RCU
  // grace period (see "When"), and a create's cgroup steps after it took
  // its slot (its BPF programs' attachment), like a destroy's (their
  // detachment), would wait behind it: 0.1 ms became 5-15 ms here.
  class OpInFlight {
   public:
    explicit OpInFlight(InitPool* pool);
    ~OpInFlight();
    OpInFlight(const OpInFlight&) = delete;
    OpInFlight& operator=(const OpInFlight&) = delete;

   private:
    InitPool* pool_;
  };

 private:
  InitPool(std::string state_root, size_t target, std::string init_binary)
      : state_root_(std::move(state_root)), target_(target), init_binary_(std::move(init_binary)) {}
  void Run();
  static uint64_t NextSlotSeq();
  absl::StatusOr<InitSlot> MakeSlot(uint64_t seq);
  struct Retired {
    StateDir state;
    ContainerCgroups cgroups{ContainerCgroups::Empty()};
    int64_t at_ms = 0;  // when it retired (CLOCK_MONOTONIC)
    pid_t killed_init = 0;
    std::string store_dir;
  };
  // The slots to keep ready now: target_, or more while creates are
  // expected (Expect).
  size_t Wanted(int64_t now_ms) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the retired remains are to be removed now; if not, when.
  bool RemovalDue(int64_t now_ms, int64_t* due_ms) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits on wake_ until `pred`, the retired remains are due, or `max` passed.
  template <typename Pred>
  void WaitUnlessRemovalDue(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds max, Pred pred);

  const std::string state_root_;
  const size_t target_;
  const std::string init_binary_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<InitSlot> ready_ ABSL_GUARDED_BY(mu_);
  InitPoolStats stats_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Retired> retired_ ABSL_GUARDED_BY(mu_);
  int64_t last_retired_ms_ ABSL_GUARDED_BY(mu_) = 0;
  int flushing_ ABSL_GUARDED_BY(mu_) = 0;  // Flush() calls waiting
  int removing_ ABSL_GUARDED_BY(mu_) = 0;  // retired entries being removed now
  int creating_ ABSL_GUARDED_BY(mu_) = 0;  // OpInFlight guards alive (creates, destroys)
  size_t expected_ ABSL_GUARDED_BY(mu_) = 0;       // Expect()ed creates not yet come
  int64_t expected_until_ms_ ABSL_GUARDED_BY(mu_) = 0;
  std::condition_variable flushed_;
  std::condition_variable made_;  // a slot became ready
  std::thread thread_;
};

}  // namespace dsec::container
