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

namespace httplib {
class Server;
}

namespace dsec::daemon {

inline constexpr char kDefaultSocket[] = "/run/dsec-vmm/api.sock";

struct HttpOptions {
  std::string socket_path = kDefaultSocket;  // "" = no unix socket
  std::string tcp_host;                      // TCP when tcp_host is set
  int tcp_port = 0;                          // 0 = any free port (see tcp_port())
  std::string token;                         // required with TCP
  int threads = 64;
  size_t max_json_bytes = 1u << 20;
  size_t max_file_bytes = 64u << 20;
  int read_timeout_s = 30;
  int write_timeout_s = 120;
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
  std::vector<std::unique_ptr<httplib::Server>> servers_;
  std::vector<std::thread> threads_;
  int tcp_port_ = 0;
  std::string socket_path_;
};

// Constant-time comparison of a presented bearer token with the expected one.
bool TokenMatches(const std::string& header_value, const std::string& token);

}  // namespace dsec::daemon
