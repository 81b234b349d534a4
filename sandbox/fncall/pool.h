// SPDX-License-Identifier: Apache-2.0
// The fncall tier: a warm pool of workers for one configuration (layers,
// language, limits). A call takes an idle worker, runs in a fresh child of
// its zygote and gives the worker back once everything the call left
// (processes, files in /tmp and /dev/shm) is gone. A background thread
// keeps workers ready: it starts them ahead of demand, replaces those that
// broke, retires idle ones, and never hands out one whose setup failed.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "sandbox/container/layer_mounts.h"
#include "sandbox/container/mount.h"
#include "sandbox/container/state_dir.h"
#include "sandbox/fncall/call.h"
#include "sandbox/fncall/worker.h"
#include "sandbox/fncall/zygote.h"

namespace dsec::sched {
class SandboxIsolation;
}
namespace dsec::network {
class SandboxNetwork;
}

namespace dsec::fncall {

inline constexpr char kDefaultStateRoot[] = "/run/dsec-vmm/fncall";

struct PoolConfig {
  std::string id;                    // [A-Za-z0-9_.-]{1,40}, unique under state_root
  std::vector<std::string> layers;   // EROFS images, lowest first
  Language language = Language::kPython;
  std::string interpreter;           // default /usr/bin/python3 or /bin/bash
  // Modules the Python zygote imports once, so calls find them loaded.
  std::vector<std::string> preload = {"json", "re", "math", "collections", "itertools",
                                      "functools", "datetime", "random", "string"};
  CallLimits limits;                 // per call; a request may override each
  std::vector<std::string> env = {
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp",
      "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"};
  // Workers are sized to demand, at most max_workers and at most what fits
  // in memory_budget_bytes (each worker may use its memory limit).
  uint64_t memory_budget_bytes = 2ull << 30;
  int max_workers = 16;
  int min_idle = 2;                  // kept warm
  int64_t idle_timeout_ms = 60000;   // idle workers beyond min_idle retire after this
  uint64_t scratch_bytes = 64ull << 20;  // tmpfs behind /tmp and /dev/shm per worker
  std::string hostname = "fncall";
  std::string state_root = kDefaultStateRoot;
  int64_t setup_timeout_ms = 30000;
  // After this many setups in a row fail, waiting calls get the error.
  int max_setup_failures = 5;
  // Optional QoS placement from sched/ (cpuset + cpu weight cgroup): every
  // worker's zygote joins it (calls, its forks, inherit it) and it owns the
  // cpu controller. Its cgroup directories are recorded in the pool's state
  // dir so that orphan cleanup removes them after a crash.
  std::shared_ptr<const sched::SandboxIsolation> isolation;
  // Optional network of the one sandbox this pool serves
  // (sandbox/network, made with SandboxNetwork::CreateShared): every
  // worker joins it (an address and a veth in its network namespace, the
  // policy's programs on a cgroup v2 directory holding its processes) and
  // leaves it when it goes; the root's /etc/resolv.conf names the node
  // resolver. Never for a pool shared by several sandboxes.
  std::shared_ptr<network::SandboxNetwork> network;
};

struct PoolStats {
  int idle = 0;
  int busy = 0;
  int starting = 0;
  int max_workers = 0;
  uint64_t workers_started = 0;
  uint64_t setup_failures = 0;
  uint64_t workers_replaced = 0;  // broke during a call and were discarded
  uint64_t workers_retired = 0;
  uint64_t calls = 0;
};

// Threads: Call, Stats and WaitReady from any thread; one refill thread
// of its own, stopped by Destroy.
class Pool {
 public:
  // Errors: InvalidArgument (config), NotFound (layer), AlreadyExists (id),
  // Internal (mounts). Workers start in the background.
  static absl::StatusOr<std::unique_ptr<Pool>> Create(PoolConfig config);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Runs one call. Errors: InvalidArgument (request), Unavailable (workers
  // cannot be set up: the last setup error), DeadlineExceeded (no worker
  // within setup_timeout_ms), Internal (the worker broke mid-call).
  absl::StatusOr<CallResult> Call(const CallRequest& request);
  // Waits until `n` workers are idle (warm-up for benchmarks and tests).
  absl::Status WaitReady(int n, int64_t timeout_ms);
  PoolStats Stats() const;
  // Pids (host view) of every live zygote.
  std::vector<pid_t> WorkerPids() const;
  const std::string& state_dir() const { return state_.path(); }
  // Stops the refill thread, destroys every worker, unmounts the root and
  // removes the state dir. Idempotent; the destructor calls it.
  absl::Status Destroy();

 private:
  Pool(PoolConfig config, container::StateDir state)
      : config_(std::move(config)), state_(std::move(state)) {}
  absl::Status MountRoot();
  void RefillLoop();
  absl::StatusOr<std::unique_ptr<Worker>> Acquire();
  void Release(std::unique_ptr<Worker> worker);
  CallLimits LimitsFor(const CallRequest& request) const;

  PoolConfig config_;
  container::StateDir state_;
  const container::SeccompProgram* seccomp_ = nullptr;
  std::vector<std::shared_ptr<const container::LayerMount>> layer_mounts_;
  container::Mount root_;
  std::string root_dir_;
  int max_workers_ = 1;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // idle_ changed, failure, stop
  std::condition_variable refill_cv_;
  std::deque<std::unique_ptr<Worker>> idle_ ABSL_GUARDED_BY(mu_);
  std::vector<pid_t> live_pids_ ABSL_GUARDED_BY(mu_);
  int busy_ ABSL_GUARDED_BY(mu_) = 0;
  int starting_ ABSL_GUARDED_BY(mu_) = 0;
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;
  int consecutive_failures_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status last_setup_error_ ABSL_GUARDED_BY(mu_);
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  PoolStats stats_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread refill_;
  bool destroyed_ = false;
};

}  // namespace dsec::fncall
