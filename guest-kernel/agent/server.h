// SPDX-License-Identifier: Apache-2.0
// The agent's protocol server: serves accepted connections (vsock in the
// guest, unix sockets in host mode), one thread per connection, one request
// at a time per connection (open more connections for concurrency).
//
// Errors: a malformed frame or a message out of place is a protocol error:
// the server sends ERROR (best effort) and closes that connection only. A
// request that fails (file not found, exec failure, limits) gets an ERROR
// reply and the connection stays usable.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "guest-kernel/agent/child.h"
#include "base/eventfd.h"
#include "base/scoped_fd.h"

namespace dsec::agent {

struct ServerOptions {
  // File operations are confined to this directory (openat2 RESOLVE_IN_ROOT:
  // "..", absolute symlinks and absolute paths stay inside; magic links such
  // as /proc/self/root are refused). Also the default cwd of execs. Execs
  // themselves are not chrooted: in the guest the root is "/".
  std::string root = "/";
  // The overlay upper directory that PACK_DIFF streams; empty: PACK_DIFF is
  // refused (FAILED_PRECONDITION).
  std::string upper;
  size_t max_connections = 64;
  size_t max_concurrent_execs = 32;
  // Spawns exec'd commands; not owned. nullptr: an internal PidfdLauncher
  // (right for any process that is not PID 1; PID 1 passes its Reaper).
  ChildLauncher* launcher = nullptr;
  // Called (on the connection's thread) after a SHUTDOWN was acknowledged
  // and the host closed the connection or shutdown_linger_ms passed.
  std::function<void()> on_shutdown;
  // NETWORK: re-addresses the guest's eth0 from dsec.net's form (PID 1
  // passes its own; on the connection's thread). Null: NETWORK is refused
  // (FAILED_PRECONDITION: this agent manages no network).
  std::function<absl::Status(const std::string& net)> configure_network;
  // CLOCK: sets the guest's wall clock (PID 1 passes clock_settime; on the
  // connection's thread). Null: CLOCK is refused (FAILED_PRECONDITION: an
  // agent that is not a guest's PID 1 must not set its host's clock).
  std::function<absl::Status(int64_t unix_ns)> set_clock;
  // ENTROPY: credits the host's seed to the guest's input pool and
  // reseeds its CRNG (PID 1 passes the random device's ioctls). Null:
  // refused (FAILED_PRECONDITION: not a guest's PID 1; the host's CRNG is
  // not the agent's to reseed).
  std::function<absl::Status(const std::string& seed)> reseed;
  // Environment every exec starts from; the request's env adds/overrides.
  std::vector<std::string> base_env = {
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"};
  int64_t handshake_timeout_ms = 10'000;
  // A host that takes none of our output for this long is dropped (its exec
  // is killed).
  int64_t write_stall_timeout_ms = 60'000;
  // After the command exits, output is still read this long from strays that
  // hold its pipes; then the pipes are closed and EXEC_DONE sent.
  int64_t post_exit_drain_ms = 1'000;
  int64_t shutdown_linger_ms = 2'000;
};

// Counters (Prometheus-style, monotonic). Any thread may read them.
struct ServerMetrics {
  std::atomic<uint64_t> connections{0};
  std::atomic<uint64_t> connections_refused{0};
  std::atomic<uint64_t> protocol_errors{0};
  std::atomic<uint64_t> execs{0};
  std::atomic<uint64_t> execs_refused{0};
  std::atomic<uint64_t> execs_timed_out{0};
  std::atomic<uint64_t> execs_killed_by_output{0};
  std::atomic<uint64_t> output_bytes_dropped{0};
  std::atomic<uint64_t> watches{0};  // WATCH requests that started
};

// Threads: ServeConnection from one accepting thread; the destructor from
// that thread too (it stops every connection, killing running commands, and
// joins their threads).
class Server {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> Create(ServerOptions options);
  ~Server();

  // Serves `conn` on a new thread, or refuses it (ERROR RESOURCE_EXHAUSTED,
  // then close) when max_connections are active.
  void ServeConnection(ScopedFd conn);

  size_t active_connections() const;
  // Waits until no connection is active; false on timeout.
  bool WaitIdle(int64_t timeout_ms);
  const ServerMetrics& metrics() const { return metrics_; }

 private:
  struct ConnThread {
    std::thread thread;
    bool done = false;
  };

  Server(ServerOptions options, ScopedFd root, EventFd stop);
  void RunConnection(ScopedFd fd);
  void JoinFinished();

  const ServerOptions options_;
  ScopedFd root_;
  EventFd stop_;
  PidfdLauncher default_launcher_;
  ChildLauncher* const launcher_;
  std::atomic<size_t> active_execs_{0};
  ServerMetrics metrics_;
  mutable absl::Mutex mu_;
  std::list<ConnThread> threads_ ABSL_GUARDED_BY(mu_);
  size_t active_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dsec::agent
