// SPDX-License-Identifier: Apache-2.0
// Network namespaces made ahead of time for sandbox inits.
//
// Why: a new network namespace costs 0.5-1 ms of kernel work here (per-net
// setup of every protocol, the loopback device, sysctl tables), the largest
// single step of a container create. The pool makes them on its own thread
// while nobody waits, brings their loopback up, and hands one to each
// sandbox init, which setns()es into it instead of cloning with
// CLONE_NEWNET. Each namespace is handed out once and never used before:
// it is exactly as fresh as a cloned one. When the pool is empty the caller
// falls back to CLONE_NEWNET (never waits). Namespaces are held by file
// descriptors only (no bind mounts), so a killed runtime leaves none.
//
// Threads: Take() from any thread; the refill thread is owned by the pool
// and joined by its destructor.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/scoped_fd.h"

namespace dsec::container {

struct NetnsPoolStats {
  uint64_t made = 0;       // namespaces created by the refill thread
  uint64_t taken = 0;      // handed out
  uint64_t misses = 0;     // Take() found the pool empty
  uint64_t failures = 0;   // refill attempts that failed (the thread then stops)
};

class NetnsPool {
 public:
  // `target` namespaces are kept ready (0: the pool is off, Take() always
  // misses).
  explicit NetnsPool(size_t target);
  ~NetnsPool();
  NetnsPool(const NetnsPool&) = delete;
  NetnsPool& operator=(const NetnsPool&) = delete;

  // The process-wide pool the container tier uses (target from
  // DSEC_NETNS_POOL, default 4; 0 turns it off). Started on first use.
  static NetnsPool& Default();
  // Sets Default()'s target before its first use (a one-sandbox process,
  // `sandbox run`, wants none: each namespace made ahead is wasted there).
  // DSEC_NETNS_POOL still wins. No effect once Default() has started.
  static void SetDefaultTarget(size_t target);

  // A fresh namespace with lo up, or an invalid fd when none is ready.
  ScopedFd Take();
  NetnsPoolStats stats() const;
  // The error that stopped refilling, if any.
  absl::Status last_error() const;

 private:
  void Refill();

  const size_t target_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<ScopedFd> ready_;
  NetnsPoolStats stats_;
  absl::Status error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dsec::container
