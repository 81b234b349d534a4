// SPDX-License-Identifier: Apache-2.0
// The daemon's HTTP/1.1 API (docs/api.yaml) over cpp-httplib: routes to the
// Service, JSON errors, body limits, a bounded thread pool and timeouts; a
// unix socket (mode 0600 in a 0700 directory) and, when asked, TCP where
// every request needs `Authorization: Bearer <token>`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/daemon/service.h"

namespace dsec::daemon {

class GuardedServer;
struct GuardMetrics;
class WatchStreams;

inline constexpr char kDefaultSocket[] = "/run/dsec-vmm/api.sock";

struct HttpOptions {
  std::string socket_path = kDefaultSocket;  // "" = no unix socket
  std::string tcp_host;                      // TCP when tcp_host is set
  int tcp_port = 0;                          // 0 = any free port (see tcp_port())
  std::string token;                         // required with TCP
  int threads = 64;
  size_t max_json_bytes = 1u << 20;
  size_t max_file_bytes = 64u << 20;
  int read_timeout_s = 30;   // one recv of a body
  int write_timeout_s = 120;  // one send of a response
  // Deadlines per request (http_guard.h): its head must arrive within
  // header_timeout_ms of its first byte, its body within body_timeout_ms of
  // the head; a connection with no request begun is closed after
  // keep_alive_timeout_ms.
  int header_timeout_ms = 10'000;
  int body_timeout_ms = 120'000;
  int keep_alive_timeout_ms = 5'000;
  // Open connections per client (TCP: its address; unix socket: its
  // process) and in all, per listener.
  int max_connections_per_client = 32;
  int max_connections = 1024;
  // Directory watch streams (GET .../files/watch) open at once over both
  // listeners: each holds a worker of `threads`. A quiet stream sends a
  // keepalive line every watch_keepalive_ms.
  int max_watch_streams = 8;
  int watch_keepalive_ms = 15'000;
};

// Threads: Start binds and starts one listener thread per transport; the
// handlers run on each server's pool. Stop (or the destructor) stops both.
class HttpServer {
 public:
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(Service* service, HttpOptions options);
  ~HttpServer();
  void Stop();
  int tcp_port() const { return tcp_port_; }

 private:
  HttpServer() = default;
  std::shared_ptr<GuardMetrics> guard_metrics_;
  std::shared_ptr<WatchStreams> watch_streams_;
  std::vector<std::unique_ptr<GuardedServer>> servers_;
  std::vector<std::thread> threads_;
  int tcp_port_ = 0;
  std::string socket_path_;
};

// Constant-time comparison of a presented bearer token with the expected one.
bool TokenMatches(const std::string& header_value, const std::string& token);

}  // namespace dsec::daemon
