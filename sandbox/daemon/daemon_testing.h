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
#include "base/scoped_fd.h"
#include "nlohmann/json.hpp"
#include "sandbox/container/test_image.h"
#include "sandbox/daemon/http_server.h"
#include "sandbox/daemon/service.h"

namespace dsec::daemon::testing {

// Builds a busybox tree and stores it as bb:1 in `store_root`.
absl::Status BuildBusyboxLayer(const std::string& store_root, const std::string& work_dir);

// A test suite's temporary directory (prefix `prefix`) with bb:1 built in
// its store/ (BuildBusyboxLayer), for SetUpTestSuite: *dir is the new
// directory (the suite deletes it), *skip why the layer could not be built
// ("" when it was). An error when the directory cannot be made.
absl::Status MakeBusyboxSuiteDir(const std::string& prefix, container::testing::TempDir** dir,
                                 std::string* skip);
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

// Raw connections, for requests an HTTP client library will not send
// (malformed heads, slow bytes, bodies that never end).
absl::StatusOr<ScopedFd> ConnectUnix(const std::string& socket_path);
// TCP to 127.0.0.1:`port` from `source_ip` (any 127/8 address: a client of
// its own as far as the daemon's per-client limits go).
absl::StatusOr<ScopedFd> ConnectTcp(int port, const std::string& source_ip = "127.0.0.1");
// Writes all of `data` (false when the peer is gone).
bool SendAll(int fd, std::string_view data);

struct RawResponse {
  bool complete = false;  // status line, head and the whole body came
  int status = 0;
  std::string head;       // status line and header fields
  std::string body;       // up to `max_body` bytes of it
  uint64_t content_length = 0;
  int64_t elapsed_ms = 0;  // from the call to the end of the head
};
// Reads one response within `timeout_ms`: the head, then up to `max_body`
// bytes of a Content-Length body (the rest is left unread).
RawResponse ReadResponse(int fd, int timeout_ms, size_t max_body = 1 << 20);
// VmRSS (or another /proc/<pid>/status field in kB) of `pid`, in KiB; -1 if unreadable.
int64_t StatusKib(pid_t pid, const std::string& field = "VmRSS");

}  // namespace dsec::daemon::testing
