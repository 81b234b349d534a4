// SPDX-License-Identifier: Apache-2.0
// The connection guard: cpp-httplib's Server with its connection handling
// replaced, so that no client can hold the API's workers or memory.
//
// cpp-httplib 0.11 gives each connection a worker for its whole life and
// bounds it only per recv (a byte every 29 s keeps it forever), reads a
// body before any handler can refuse it, and has no per-client limit. Here
// the accepted socket leaves the worker at once for one event-loop thread
// (the guard), which admits it against the per-client and total caps,
// reads its head within the head deadline, checks the framing and the
// declared length against the route's limit (answering 400/408/413/431
// itself, a worker never seen), and only then hands the connection with
// its complete head to a worker. The worker runs httplib's own request
// processing (`process_request`) on a ConnectionStream (http_connection.h)
// that bounds the body by its deadline and length; the connection then
// goes back to the guard to wait for its next request, so an idle
// keep-alive connection holds no worker either.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>

#include <httplib.h>

#include "absl/status/statusor.h"
#include "base/event_loop.h"
#include "base/eventfd.h"
#include "sandbox/daemon/http_connection.h"

namespace dsec::daemon {

struct GuardOptions {
  BodyLimits body;
  // The largest body of a head's route; null: BodyLimitFor (the node
  // API's routes). Another API served through a guard (sandbox/e2b) has
  // its own upload routes.
  std::function<size_t(const RequestHead& head)> body_limit;
  int header_timeout_ms = 10'000;
  int body_timeout_ms = 120'000;
  int keep_alive_timeout_ms = 5'000;
  int read_timeout_ms = 30'000;
  int write_timeout_ms = 120'000;
  size_t max_head_bytes = 64u << 10;
  int max_connections_per_client = 32;
  int max_connections = 1024;
  int max_requests_per_connection = 100;
  int threads = 64;
};

// What the guards of a daemon refused or cut (Threads: any).
struct GuardMetrics {
  std::atomic<uint64_t> refused_client_cap{0};
  std::atomic<uint64_t> refused_total_cap{0};
  std::atomic<uint64_t> head_deadline{0};
  std::atomic<uint64_t> body_deadline{0};
  std::atomic<uint64_t> bad_head{0};
  std::atomic<uint64_t> body_too_large{0};
  // Prometheus text: dsec_http_refused_connections_total{reason},
  // dsec_http_cut_requests_total{reason}.
  std::string Text() const;
};

// Threads: routes and handlers are set before listen_after_bind; the
// listener thread accepts, a worker of the pool admits each connection,
// the guard's own thread reads heads, workers serve requests. Shutdown
// (any thread, once) must come before stop(): it ends the guard's thread
// and wakes workers waiting for a body.
class GuardedServer final : public httplib::Server {
 public:
  static absl::StatusOr<std::unique_ptr<GuardedServer>> Create(GuardOptions options,
                                                               std::shared_ptr<GuardMetrics> metrics);
  ~GuardedServer() override;
  void Shutdown();

 private:
  GuardedServer(GuardOptions options, std::shared_ptr<GuardMetrics> metrics, std::unique_ptr<EventLoop> loop,
                EventFd stop);

  // httplib calls it on a worker for each accepted socket: admission, then
  // the socket goes to the guard's thread.
  bool process_and_close_socket(socket_t sock) override;
  // A worker: one request on `c`, then back to the guard (or closed).
  void Serve(std::shared_ptr<Connection> c);
  // Any thread: the connection goes (back) to the guard's loop.
  void ToGuard(std::shared_ptr<Connection> c, bool drain);

  // The guard's thread only.
  void Register(std::shared_ptr<Connection> c);
  void OnEvent(int fd);
  void Examine(const std::shared_ptr<Connection>& c);
  void Refuse(const std::shared_ptr<Connection>& c, int http_status, const absl::Status& status);
  void Drain(Connection& c);
  void Close(int fd);
  void Sweep();

  const GuardOptions options_;
  const std::shared_ptr<GuardMetrics> metrics_;
  ClientTable clients_;
  std::unique_ptr<EventLoop> loop_;
  EventFd stop_;  // signalled by Shutdown: wakes workers waiting for a body
  std::thread loop_thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<httplib::TaskQueue*> pool_{nullptr};  // made by httplib's listen, on our new_task_queue
  std::unordered_map<int, std::shared_ptr<Connection>> conns_;  // the guard's thread only
};

}  // namespace dsec::daemon
