// SPDX-License-Identifier: Apache-2.0
// Shared by the E2B server's files: its state (what E2B knows of a sandbox
// that the node does not: template, metadata, env, access token, the
// commands started here) and the answer helpers.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "sandbox/daemon/exec_stream.h"
#include "sandbox/daemon/http_guard.h"
#include "sandbox/e2b/command_feed.h"
#include "sandbox/e2b/server.h"
#include "base/dir_watch.h"

namespace dsec::e2b {

// One sandbox made through this API. The node's Service is the truth of
// whether it lives (its TTL reaper, a DELETE on the node API): a record
// whose sandbox the node no longer has is dropped when next looked at.
struct Record {
  std::string id;
  std::string template_id;
  std::string access_token;
  nlohmann::json metadata = nlohmann::json::object();
  std::map<std::string, std::string> env_vars;
  int64_t started_ms = 0;

  std::mutex mu;
  // Commands started through process.Process/Start whose exec has not
  // been seen to end (Sweep drops those that ended).
  std::map<uint32_t, StartRequest> running ABSL_GUARDED_BY(mu);
  // Their node execs as the clients attached to them read them (Start's,
  // Connect's). Held here until the exec ends, so that a command outlives
  // its clients (a background command whose client left) and a client
  // can attach again.
  std::map<uint32_t, std::shared_ptr<CommandFeed>> feeds ABSL_GUARDED_BY(mu);
  // Their controls, where the sandbox's tier offers them
  // (Service::ExecControlOffered): stdin, and a signal to one command.
  std::map<uint32_t, std::shared_ptr<ExecControl>> controls ABSL_GUARDED_BY(mu);
  uint32_t next_pid ABSL_GUARDED_BY(mu) = 1000;
  // Directory watches made by CreateWatcher, read by GetWatcherEvents
  // (WatchDir's streams hold their own).
  std::map<std::string, std::shared_ptr<DirWatch>> watchers ABSL_GUARDED_BY(mu);
  uint64_t next_watcher ABSL_GUARDED_BY(mu) = 1;
  // Drops the commands whose exec ended; returns their feeds, to be
  // released outside `mu` (the last release joins the exec's thread).
  std::vector<std::shared_ptr<CommandFeed>> Sweep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

struct E2bServer::State {
  daemon::Service* svc = nullptr;
  E2bOptions options;
  std::unique_ptr<daemon::GuardedServer> server;
  std::shared_ptr<daemon::GuardMetrics> guard_metrics;
  // WatchDir streams open now (each holds one of the server's threads
  // while it lasts): at most options.max_watch_streams.
  std::atomic<int> watch_streams{0};
  // Their watches, closed when the server stops (as are the records'
  // command feeds): a stream waiting for its next event ends at once
  // instead of holding the server's stop for a keepalive interval.
  std::mutex streams_mu;
  std::vector<std::weak_ptr<DirWatch>> stream_watches ABSL_GUARDED_BY(streams_mu);
  // Set by CloseStreams: a stream that registers after it closes itself.
  std::atomic<bool> stopping{false};
  // Streams (Start, Connect, WatchDir) whose response is not done: Stop
  // lets them send their end (briefly) before the sockets close.
  std::atomic<int> open_streams{0};
  // Stop: ends every stream's wait (feeds, watches).
  void CloseStreams();

  std::mutex mu;
  std::map<std::string, std::shared_ptr<Record>> records ABSL_GUARDED_BY(mu);
  // Records of sandboxes the node reaped are dropped when looked at, and
  // by a sweep once the records reach this many (then twice the live
  // ones): bounded without a lookup per create.
  size_t sweep_at ABSL_GUARDED_BY(mu) = 64;

  // The record of a sandbox the node still has (else dropped): null if none.
  std::shared_ptr<Record> Find(const std::string& id);
  void Forget(const std::string& id);
  std::vector<std::shared_ptr<Record>> All();
  // Adds a record (sweeping first when due).
  void Add(std::shared_ptr<Record> r);
};

// Control plane answers: E2B's {"code", "message"}.
void SendApiError(httplib::Response& res, int http_status, absl::string_view message);
void SendApiStatus(httplib::Response& res, const absl::Status& status);
void SendJson(httplib::Response& res, const nlohmann::json& j, int status = 200);
// The HTTP status of a node error for the control plane (Unimplemented: 501).
int ApiHttpStatus(absl::StatusCode code);

// The sandbox an envd request is for: E2b-Sandbox-Id, else a Host of
// `<port>-<id>.<domain>`; "" when neither.
std::string EnvdSandboxOf(const httplib::Request& req);

// A unary Connect call (JSON codec): the request message in, the answer
// or its error out (the code's HTTP status with {"code", "message"}).
using UnaryFn = std::function<absl::StatusOr<nlohmann::json>(const std::string& sandbox_id,
                                                             const nlohmann::json& request)>;
void ServeUnary(E2bServer::State* st, const httplib::Request& req, httplib::Response& res, const UnaryFn& fn);

// Connect streams (server-streaming calls, JSON codec).
inline constexpr char kConnectJsonType[] = "application/connect+json";
bool ContentTypeIs(const httplib::Request& req, absl::string_view type);
// A streaming call that ends before its first message: HTTP 200 and the
// end-of-stream envelope carrying the error (the protocol's form).
void EndStreamNow(httplib::Response& res, const absl::Status& status);
// The request message of a server-streaming call, or the error answered.
absl::StatusOr<nlohmann::json> StreamRequest(const E2bServer::State* st, const httplib::Request& req,
                                             httplib::Response& res);
// envd's keepalive: an event after each quiet interval the client asks
// for (the SDK: Keepalive-Ping-Interval 50 s), so that a silent stream
// outlives the client's and proxies' idle timeouts (undici: 300 s); -1
// when the client asks for none.
int64_t KeepaliveMs(const httplib::Request& req);

// Counts one stream in `n` for its life (held by its content provider).
class StreamCount {
 public:
  explicit StreamCount(std::atomic<int>* n) : n_(n) { n_->fetch_add(1); }
  ~StreamCount() { n_->fetch_sub(1); }
  StreamCount(const StreamCount&) = delete;
  StreamCount& operator=(const StreamCount&) = delete;

 private:
  std::atomic<int>* n_;
};

void AddControlPlaneRoutes(httplib::Server& srv, E2bServer::State* st);
void AddProcessRoutes(httplib::Server& srv, E2bServer::State* st);
void AddFilesystemRoutes(httplib::Server& srv, E2bServer::State* st);

}  // namespace dsec::e2b
