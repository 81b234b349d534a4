// SPDX-License-Identifier: Apache-2.0
// Test support for the daemon: a busybox layer in a temporary layer store,
// a layer resolver over it, a daemon in the test's own process, and an HTTP
// client on a unix socket.
#pragma once

#include <httplib.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sandbox/daemon/http_server.h"
#include "sandbox/daemon/service.h"

namespace dsec::daemon::testing {

// Builds a busybox tree and stores it as bb:1 in `store_root`.
absl::Status BuildBusyboxLayer(const std::string& store_root, const std::string& work_dir);
// refs -> store chains (bottom first); the tiers' default layers map to
// what tests build: base:bookworm -> bb:1 (none for fncall, whose image is
// a whole root), python:1 -> `fncall_image`.
LayerResolver StoreResolver(const std::string& store_root, const std::string& fncall_image);

// The daemon in this process, over a container tier (16 MiB uppers) and a
// fncall tier (2 workers per pool), their state under `run_dir` (made
// here, like its ctr/, fn/ and trj/), layers resolved by StoreResolver over
// `store` (with the fncall test image when there is one; pack_diff and
// /v1/layers use `store` too unless `service.layer_store` names another), the API on
// <run_dir>/api/api.sock. The server stops before the service goes.
// Threads: the test's; the server's own threads serve requests.
class LocalDaemon {
 public:
  static absl::StatusOr<std::unique_ptr<LocalDaemon>> Start(const std::string& run_dir,
                                                            const std::string& store,
                                                            ServiceOptions service, HttpOptions http = {});
  ~LocalDaemon();
  LocalDaemon(const LocalDaemon&) = delete;
  LocalDaemon& operator=(const LocalDaemon&) = delete;

  Service& service() { return *service_; }
  HttpServer& server() { return *server_; }
  const std::string& socket() const { return socket_; }

 private:
  LocalDaemon() = default;
  std::unique_ptr<Service> service_;
  std::unique_ptr<HttpServer> server_;
  std::string socket_;
};

std::unique_ptr<httplib::Client> UnixClient(const std::string& socket_path);
// Body as JSON (null on parse failure).
nlohmann::json JsonOf(const httplib::Result& r);

}  // namespace dsec::daemon::testing
