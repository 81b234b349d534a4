// SPDX-License-Identifier: Apache-2.0
#include "sandbox/e2b/server.h"

#include <sys/socket.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/clock.h"
#include "base/json_fields.h"
#include "base/logging.h"
#include "base/status.h"
#include "sandbox/e2b/server_internal.h"

namespace dsec::e2b {

using nlohmann::json;

std::shared_ptr<Record> E2bServer::State::Find(const std::string& id) {
  std::shared_ptr<Record> r;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = records.find(id);
    if (it == records.end()) return nullptr;
    r = it->second;
  }
  if (!svc->Get(id).ok()) {  // reaped, or deleted through the node API
    Forget(id);
    return nullptr;
  }
  return r;
}

void E2bServer::State::Forget(const std::string& id) {
  std::shared_ptr<Record> gone;  // released outside the lock: it may join exec threads
  std::lock_guard<std::mutex> lock(mu);
  auto it = records.find(id);
  if (it == records.end()) return;
  gone = std::move(it->second);
  records.erase(it);
}

std::vector<std::shared_ptr<CommandFeed>> Record::Sweep() {
  std::vector<std::shared_ptr<CommandFeed>> ended;
  for (auto it = feeds.begin(); it != feeds.end();) {
    if (!it->second->ended()) {
      ++it;
      continue;
    }
    running.erase(it->first);
    controls.erase(it->first);
    ended.push_back(std::move(it->second));
    it = feeds.erase(it);
  }
  return ended;
}

std::vector<std::shared_ptr<Record>> E2bServer::State::All() {
  std::vector<std::shared_ptr<Record>> all;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [id, r] : records) all.push_back(r);
  }
  std::vector<std::shared_ptr<Record>> live;
  for (auto& r : all) {
    if (svc->Get(r->id).ok()) {
      live.push_back(std::move(r));
    } else {
      Forget(r->id);
    }
  }
  return live;
}

void E2bServer::State::Add(std::shared_ptr<Record> r) {
  bool sweep = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    sweep = records.size() >= sweep_at;
  }
  if (sweep) {
    const size_t live = All().size();
    std::lock_guard<std::mutex> lock(mu);
    sweep_at = 2 * live + 64;
  }
  std::lock_guard<std::mutex> lock(mu);
  records[r->id] = std::move(r);
}

void SendJson(httplib::Response& res, const json& j, int status) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void SendApiError(httplib::Response& res, int http_status, absl::string_view message) {
  SendJson(res, ApiErrorJson(http_status, message), http_status);
}

int ApiHttpStatus(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument: return 400;
    case absl::StatusCode::kFailedPrecondition: return 409;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists: return 409;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

void SendApiStatus(httplib::Response& res, const absl::Status& status) {
  std::string message(status.message());
  if (auto field = FieldOf(status); field && !absl::StrContains(message, *field)) {
    message = absl::StrCat(*field, ": ", message);
  }
  SendApiError(res, ApiHttpStatus(status.code()), message);
}

std::string EnvdSandboxOf(const httplib::Request& req) {
  std::string id = req.get_header_value("E2b-Sandbox-Id");
  if (!id.empty()) return id;
  // <port>-<sandboxID>.<domain>
  const std::string host = req.get_header_value("Host");
  const size_t dot = host.find('.');
  if (dot == std::string::npos) return "";
  const absl::string_view label = absl::string_view(host).substr(0, dot);
  const size_t dash = label.find('-');
  if (dash == absl::string_view::npos || dash == 0) return "";
  for (char c : label.substr(0, dash)) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return "";
  }
  return std::string(label.substr(dash + 1));
}

namespace {

constexpr char kEnvdPort[] = "49983";

bool IsEnvdPath(absl::string_view path) {
  return path == "/files" || path == "/health" || absl::StartsWith(path, "/process.Process/") ||
         absl::StartsWith(path, "/filesystem.Filesystem/");
}

bool AnyKeyMatches(const std::string& presented, const std::vector<std::string>& keys) {
  bool ok = false;
  for (const std::string& k : keys) ok |= KeyMatches(presented, k);  // no early exit
  return ok;
}

// Who a request is for, and whether it may pass (see server.h, Routing).
httplib::Server::HandlerResponse Admit(E2bServer::State* st, const httplib::Request& req, httplib::Response& res) {
  using HR = httplib::Server::HandlerResponse;
  const std::string sb = EnvdSandboxOf(req);
  if (!sb.empty()) {
    std::shared_ptr<Record> rec = st->Find(sb);
    if (rec == nullptr) {
      // What E2B's edge answers for a sandbox it does not know: the SDK
      // reads 502 as "the sandbox is gone".
      SendJson(res, json{{"sandboxId", sb}, {"message", "The sandbox was not found"}, {"code", 502}}, 502);
      return HR::Handled;
    }
    if (!KeyMatches(req.get_header_value("X-Access-Token"), rec->access_token)) {
      SendApiError(res, 401, "missing or wrong X-Access-Token for this sandbox");
      return HR::Handled;
    }
    // Only envd's port is served: a sandbox's own ports (getHost) are not
    // reachable through this API.
    const std::string port = req.get_header_value("E2b-Sandbox-Port");
    if (!port.empty() && port != kEnvdPort) {
      SendApiError(res, 501, absl::StrCat("reaching port ", port, " of a sandbox is not supported by dsec-vmm's "
                                          "E2B API (only envd's, ", kEnvdPort, ")"));
      return HR::Handled;
    }
    if (!IsEnvdPath(req.path)) {
      SendApiError(res, 404, absl::StrCat("envd has no route ", req.method, " ", req.path));
      return HR::Handled;
    }
    return HR::Unhandled;
  }
  if (req.path == "/health") return HR::Unhandled;
  if (IsEnvdPath(req.path)) {
    SendApiError(res, 400, "envd routes need the E2b-Sandbox-Id header (or a <port>-<sandboxID>.<domain> host)");
    return HR::Handled;
  }
  if (!AnyKeyMatches(req.get_header_value("X-API-KEY"), st->options.api_keys)) {
    SendApiError(res, 401, "missing or invalid X-API-KEY");
    return HR::Handled;
  }
  return HR::Unhandled;
}

void Configure(daemon::GuardedServer& srv, const E2bOptions& o) {
  srv.set_payload_max_length(o.max_file_bytes + (2u << 20));
  srv.set_keep_alive_timeout(5);
  // A streamed command's envelopes are small writes: with Nagle each one
  // after the first waited for the client's delayed ACK (40 ms here, the
  // whole gap to the node API in bench.sh). Accepted sockets inherit it
  // from the listener.
  srv.set_tcp_nodelay(true);
  srv.set_error_handler(httplib::Server::HandlerWithResponse(
      [](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // ours already
        SendApiError(res, res.status,
                     res.status == 404 ? absl::StrCat("no route ", req.method, " ", req.path)
                                       : absl::StrCat("HTTP ", res.status));
        return httplib::Server::HandlerResponse::Handled;
      }));
  srv.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unexpected exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    SendApiError(res, 500, what);
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<E2bServer>> E2bServer::Start(daemon::Service* service, E2bOptions options) {
  if (options.api_keys.empty()) return absl::InvalidArgumentError("the E2B API needs at least one API key");
  std::unique_ptr<E2bServer> s(new E2bServer());
  auto st = std::make_shared<State>();
  st->svc = service;
  st->options = std::move(options);
  const E2bOptions& o = st->options;
  daemon::GuardOptions g;
  g.body = daemon::BodyLimits{o.max_json_bytes, o.max_file_bytes};
  // Uploads (POST /files: multipart framing on top) take the file limit.
  const size_t json_limit = o.max_json_bytes, upload_limit = o.max_file_bytes + (1u << 20);
  g.body_limit = [json_limit, upload_limit](const daemon::RequestHead& head) {
    return head.method == "POST" && head.path == "/files" ? upload_limit : json_limit;
  };
  g.threads = o.threads;
  g.max_connections_per_client = o.max_connections_per_client;
  g.max_connections = o.max_connections;
  st->guard_metrics = std::make_shared<daemon::GuardMetrics>();
  DSEC_ASSIGN_OR_RETURN(st->server, daemon::GuardedServer::Create(g, st->guard_metrics));
  daemon::GuardedServer& srv = *st->server;
  Configure(srv, o);
  State* raw_state = st.get();
  srv.set_pre_routing_handler(
      [raw_state](const httplib::Request& req, httplib::Response& res) { return Admit(raw_state, req, res); });
  AddControlPlaneRoutes(srv, raw_state);
  AddProcessRoutes(srv, raw_state);
  AddFilesystemRoutes(srv, raw_state);
  if (o.port == 0) {
    const int port = srv.bind_to_any_port(o.host);
    if (port <= 0) return absl::InternalError(absl::StrCat("E2B API: cannot listen on ", o.host));
    s->port_ = port;
  } else {
    if (!srv.bind_to_port(o.host, o.port)) {
      return absl::InternalError(absl::StrCat("E2B API: cannot listen on ", o.host, ":", o.port));
    }
    s->port_ = o.port;
  }
  s->state_ = st;
  s->thread_ = std::thread([raw = &srv] { raw->listen_after_bind(); });
  // As the node API (http_server.cc): httplib's stop() is a no-op until
  // its accept loop runs, and nothing signals that; re-read the flag.
  const int64_t deadline = MonotonicNowNs() + 10'000'000'000;
  while (!srv.is_running()) {
    if (MonotonicNowNs() > deadline) {
      s->Stop();
      return absl::InternalError("the E2B listener did not start");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  DSEC_LOG(info, "e2b: listening on {}:{} ({} API keys, {} templates from flags)", o.host, s->port_,
           o.api_keys.size(), o.templates.size());
  return s;
}

void E2bServer::State::CloseStreams() {
  stopping = true;
  std::vector<std::shared_ptr<Record>> all;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [id, r] : records) all.push_back(r);
  }
  for (const std::shared_ptr<Record>& r : all) {
    std::lock_guard<std::mutex> lock(r->mu);
    for (const auto& [pid, feed] : r->feeds) feed->Close();
  }
  std::lock_guard<std::mutex> lock(streams_mu);
  for (const std::weak_ptr<DirWatch>& w : stream_watches) {
    if (std::shared_ptr<DirWatch> live = w.lock()) live->Close();
  }
  stream_watches.clear();
}

void E2bServer::Stop() {
  if (state_ && state_->server) {
    state_->CloseStreams();
    // Their ends go out before the sockets close (a command's within its
    // feed's read slice, 100 ms); bounded.
    for (int i = 0; i < 100 && state_->open_streams.load() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    state_->server->Shutdown();
    state_->server->stop();
  }
  if (thread_.joinable()) thread_.join();
}

E2bServer::~E2bServer() { Stop(); }

absl::StatusOr<std::vector<std::string>> ReadApiKeyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the API key file ", path));
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    const absl::string_view k = absl::StripAsciiWhitespace(line);
    if (k.empty() || k[0] == '#') continue;
    if (k.size() < 16) return absl::InvalidArgumentError(absl::StrCat(path, ": a key shorter than 16 characters"));
    keys.emplace_back(k);
  }
  if (keys.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " holds no key"));
  return keys;
}

}  // namespace dsec::e2b
