// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/http_server.h"

#include <httplib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "sandbox/daemon/errors.h"
#include "sandbox/daemon/exec_stream.h"
#include "sandbox/daemon/http_guard.h"
#include "sandbox/daemon/http_parse.h"
#include "sandbox/daemon/watch_stream.h"
#include "base/logging.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::daemon {

using nlohmann::json;

namespace {

constexpr char kJson[] = "application/json";

void SendError(httplib::Response& res, const absl::Status& s, int http_status = 0) {
  res.status = http_status != 0 ? http_status : HttpStatusFor(s.code());
  res.set_content(ErrorJson(s).dump(-1, ' ', false, json::error_handler_t::replace), kJson);
}

void SendJson(httplib::Response& res, const json& j, int status = 200) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), kJson);
}

// Parses a JSON body within the size and depth limits (http_parse.h); an
// empty body is {}. The guard refused a longer declared body already; a
// chunked one can still be up to its framing allowance over.
absl::StatusOr<json> ParseBody(const httplib::Request& req, size_t limit, httplib::Response& res) {
  absl::StatusOr<json> j = ParseJsonBody(req.body, limit);
  if (!j.ok()) SendError(res, j.status(), absl::IsResourceExhausted(j.status()) ? 413 : 0);
  return j;
}

std::string RandomBoundary() {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  return absl::StrCat("dsec-", absl::Hex(gen(), absl::kZeroPad16), absl::Hex(gen(), absl::kZeroPad16));
}

// A file read with a Range header: at most kMaxRanges ranges, merged where
// they overlap, so an answer is never larger than the file (plus multipart
// framing); 416 otherwise.
void SendFile(const httplib::Request& req, httplib::Response& res, const std::string& data) {
  constexpr char kOctets[] = "application/octet-stream";
  if (!req.has_header("Range")) return res.set_content(data, kOctets);
  auto ranges = ResolveRanges(req.get_header_value("Range"), data.size());
  if (!ranges.ok()) {
    res.set_header("Content-Range", absl::StrCat("bytes */", data.size()));
    return SendError(res, absl::InvalidArgumentError(ranges.status().message()), 416);
  }
  RangedBody r = MakeRangedBody(data, *ranges, kOctets, RandomBoundary());
  res.status = 206;
  if (!r.content_range.empty()) res.set_header("Content-Range", r.content_range);
  res.set_content(std::move(r.body), r.content_type);
}

template <typename F>
auto WithJsonBody(Service* svc, const HttpOptions& o, F f) {
  (void)svc;
  return [o, f](const httplib::Request& req, httplib::Response& res) {
    auto body = ParseBody(req, o.max_json_bytes, res);
    if (!body.ok()) return;
    f(req, res, *body);
  };
}

void Reply(httplib::Response& res, const absl::StatusOr<json>& r, int ok_status = 200) {
  if (!r.ok()) return SendError(res, r.status());
  SendJson(res, *r, ok_status);
}

void ReplyEmpty(httplib::Response& res, const absl::Status& s) {
  if (!s.ok()) return SendError(res, s);
  res.status = 204;
}

void AddRoutes(httplib::Server& srv, Service* svc, const HttpOptions& o,
               std::shared_ptr<const GuardMetrics> guard_metrics, std::shared_ptr<WatchStreams> watches) {
  srv.Get("/v1/health", [svc](const httplib::Request&, httplib::Response& res) { SendJson(res, svc->Health()); });
  srv.Get("/metrics", [svc, guard_metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(svc->MetricsText() + guard_metrics->Text(), "text/plain; version=0.0.4");
  });
  srv.Post("/v1/sandboxes", WithJsonBody(svc, o, [svc](const httplib::Request&, httplib::Response& res, const json& b) {
             Reply(res, svc->Create(b), 201);
           }));
  srv.Get("/v1/sandboxes", [svc](const httplib::Request&, httplib::Response& res) { SendJson(res, svc->List()); });
  srv.Get(R"(/v1/sandboxes/([^/]+))", [svc](const httplib::Request& req, httplib::Response& res) {
    Reply(res, svc->Get(req.matches[1]));
  });
  srv.Delete(R"(/v1/sandboxes/([^/]+))", [svc](const httplib::Request& req, httplib::Response& res) {
    ReplyEmpty(res, svc->Delete(req.matches[1]));
  });
  srv.Post(R"(/v1/sandboxes/([^/]+)/exec)",
           WithJsonBody(svc, o, [svc](const httplib::Request& req, httplib::Response& res, const json& b) {
             Reply(res, svc->Exec(req.matches[1], b));
           }));
  srv.Post(R"(/v1/sandboxes/([^/]+)/exec/stream)",
           WithJsonBody(svc, o, [svc](const httplib::Request& req, httplib::Response& res, const json& b) {
             // The exec runs on its own thread (exec_stream.h); this one
             // answers a request error as usual, else streams the lines.
             std::shared_ptr<StreamedExec> stream = StreamedExec::Start(svc, req.matches[1], b);
             if (absl::Status s = stream->WaitStarted(); !s.ok()) return SendError(res, s);
             res.status = 200;
             res.set_chunked_content_provider(
                 "application/x-ndjson",
                 [stream](size_t, httplib::DataSink& sink) {
                   std::string line;
                   if (!stream->NextLine(&line)) {
                     sink.done();
                     return true;
                   }
                   if (!sink.write(line.data(), line.size())) {
                     stream->Abandon();  // the client is gone
                     return false;
                   }
                   return true;
                 },
                 // Runs when the response is destroyed; the last reference
                 // (here or in the provider) joins the exec thread.
                 [stream](bool success) {
                   if (!success) stream->Abandon();
                 });
           }));
  srv.Get(R"(/v1/sandboxes/([^/]+)/files)", [svc](const httplib::Request& req, httplib::Response& res) {
    if (!req.has_param("path")) return SendError(res, InvalidField("path", "path is required"));
    auto r = svc->ReadFile(req.matches[1], req.get_param_value("path"));
    if (!r.ok()) return SendError(res, r.status());
    SendFile(req, res, *r);
  });
  srv.Put(R"(/v1/sandboxes/([^/]+)/files)", [svc, o](const httplib::Request& req, httplib::Response& res) {
    if (!req.has_param("path")) return SendError(res, InvalidField("path", "path is required"));
    if (req.body.size() > o.max_file_bytes) {
      return SendError(res, absl::ResourceExhaustedError("file over the upload limit"), 413);
    }
    ReplyEmpty(res, svc->WriteFile(req.matches[1], req.get_param_value("path"),
                                   req.has_param("mode") ? req.get_param_value("mode") : "", req.body));
  });
  srv.Get(R"(/v1/sandboxes/([^/]+)/files/list)", [svc](const httplib::Request& req, httplib::Response& res) {
    Reply(res, svc->ListFiles(req.matches[1], req.has_param("path") ? req.get_param_value("path") : "/"));
  });
  srv.Get(R"(/v1/sandboxes/([^/]+)/files/watch)", [svc, o, watches](const httplib::Request& req,
                                                                     httplib::Response& res) {
    if (!req.has_param("path")) return SendError(res, InvalidField("path", "path is required"));
    bool recursive = false;
    if (req.has_param("recursive")) {
      const std::string v = req.get_param_value("recursive");
      if (v == "true" || v == "1") {
        recursive = true;
      } else if (v != "false" && v != "0") {
        return SendError(res, InvalidField("recursive", "must be true or false"));
      }
    }
    const std::string path = req.get_param_value("path");
    absl::StatusOr<std::shared_ptr<DirWatch>> watch = svc->WatchDir(req.matches[1], path, recursive);
    if (!watch.ok()) return SendError(res, watch.status());
    if (absl::Status s = watches->Add(*watch); !s.ok()) return SendError(res, s);
    auto lines = std::make_shared<WatchLines>(*std::move(watch), path, recursive, o.watch_keepalive_ms);
    res.status = 200;
    res.set_chunked_content_provider("application/x-ndjson", [lines](size_t, httplib::DataSink& sink) {
      std::string out;
      if (!lines->Next(&out)) {
        sink.done();
        return true;
      }
      return sink.write(out.data(), out.size());  // false: the client is gone, the watch goes with `lines`
    });
  });
  srv.Post(R"(/v1/sandboxes/([^/]+)/pack_diff)",
           WithJsonBody(svc, o, [svc](const httplib::Request& req, httplib::Response& res, const json& b) {
             Reply(res, svc->PackDiff(req.matches[1], b), 201);
           }));
  srv.Post(R"(/v1/sandboxes/([^/]+)/fork)",
           WithJsonBody(svc, o, [svc](const httplib::Request& req, httplib::Response& res, const json& b) {
             Reply(res, svc->Fork(req.matches[1], b), 201);
           }));
  srv.Post(R"(/v1/sandboxes/([^/]+)/snapshot)",
           WithJsonBody(svc, o, [svc](const httplib::Request& req, httplib::Response& res, const json& b) {
             Reply(res, svc->Snapshot(req.matches[1], b), 201);
           }));
  srv.Get("/v1/snapshots", [svc](const httplib::Request&, httplib::Response& res) {
    Reply(res, svc->ListSnapshots());
  });
  srv.Get(R"(/v1/snapshots/([^/]+))", [svc](const httplib::Request& req, httplib::Response& res) {
    Reply(res, svc->GetSnapshot(req.matches[1]));
  });
  srv.Delete(R"(/v1/snapshots/([^/]+))", [svc](const httplib::Request& req, httplib::Response& res) {
    ReplyEmpty(res, svc->DeleteSnapshot(req.matches[1]));
  });
  srv.Patch(R"(/v1/sandboxes/([^/]+)/network)",
            WithJsonBody(svc, o, [svc](const httplib::Request& req, httplib::Response& res, const json& b) {
              Reply(res, svc->SetNetwork(req.matches[1], b));
            }));
  srv.Post(R"(/v1/sandboxes/([^/]+)/pause)", [svc](const httplib::Request& req, httplib::Response& res) {
    Reply(res, svc->Pause(req.matches[1]));
  });
  srv.Post(R"(/v1/sandboxes/([^/]+)/resume)", [svc](const httplib::Request& req, httplib::Response& res) {
    Reply(res, svc->Resume(req.matches[1]));
  });
  srv.Get("/v1/layers", [svc](const httplib::Request&, httplib::Response& res) { Reply(res, svc->ListLayers()); });
  srv.Post("/v1/layers", WithJsonBody(svc, o, [svc](const httplib::Request&, httplib::Response& res, const json& b) {
             Reply(res, svc->AddLayer(b), 201);
           }));
  srv.Delete(R"(/v1/layers/(.+))", [svc](const httplib::Request& req, httplib::Response& res) {
    ReplyEmpty(res, svc->RemoveLayer(req.matches[1]));
  });
  srv.Post(R"(/v1/tasks/([^/]+)/resume)",
           WithJsonBody(svc, o, [svc](const httplib::Request& req, httplib::Response& res, const json& b) {
             Reply(res, svc->ResumeTask(req.matches[1], b), 201);
           }));
  srv.Get(R"(/v1/tasks/([^/]+)/log)", [svc](const httplib::Request& req, httplib::Response& res) {
    Reply(res, svc->TaskLog(req.matches[1]));
  });
  srv.Delete(R"(/v1/tasks/([^/]+))", [svc](const httplib::Request& req, httplib::Response& res) {
    ReplyEmpty(res, svc->DeleteTask(req.matches[1]));
  });
}

GuardOptions GuardOptionsOf(const HttpOptions& o) {
  GuardOptions g;
  g.body = BodyLimits{o.max_json_bytes, o.max_file_bytes};
  g.header_timeout_ms = o.header_timeout_ms;
  g.body_timeout_ms = o.body_timeout_ms;
  g.keep_alive_timeout_ms = o.keep_alive_timeout_ms;
  g.read_timeout_ms = o.read_timeout_s * 1000;
  g.write_timeout_ms = o.write_timeout_s * 1000;
  g.max_connections_per_client = o.max_connections_per_client;
  g.max_connections = o.max_connections;
  g.threads = o.threads;
  return g;
}

// The thread pool, deadlines and connection caps are the guard's
// (http_guard.h); httplib's own settings here only shape its answers.
// httplib 0.11.4 listens with a backlog of 5: a burst of connections that
// arrives while its accept thread waits for a CPU overflows it, and the
// kernel drops them (seen as connections closed before an answer under
// load). The listening socket is recorded when httplib makes it and given
// a backlog of kListenBacklog (capped by net.core.somaxconn) once bound:
// listen(2) on a listening socket changes its backlog.
constexpr int kListenBacklog = 4096;

std::shared_ptr<std::atomic<int>> RecordListener(GuardedServer& srv) {
  auto fd = std::make_shared<std::atomic<int>>(-1);
  srv.set_socket_options([fd](socket_t sock) {
    int yes = 1;  // httplib's default option, which this replaces
    (void)::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    fd->store(sock);
  });
  return fd;
}

absl::Status WidenBacklog(const std::atomic<int>& fd, const std::string& where) {
  if (fd.load() < 0 || ::listen(fd.load(), kListenBacklog) != 0) {
    return ErrnoToStatus(absl::StrCat("listen backlog of ", where));
  }
  return absl::OkStatus();
}

void Configure(GuardedServer& srv, const HttpOptions& o) {
  // A streamed exec's lines are small writes: with Nagle each one after
  // the first waited for the TCP client's delayed ACK (a 4-line streamed
  // exec: 44 ms p50 over TCP, 1.5 ms over the unix socket). Accepted
  // sockets inherit it from the listener; the unix socket ignores it.
  srv.set_tcp_nodelay(true);
  srv.set_payload_max_length(o.max_file_bytes + (1u << 20));
  srv.set_keep_alive_timeout((o.keep_alive_timeout_ms + 999) / 1000);
  srv.set_keep_alive_max_count(static_cast<size_t>(GuardOptions{}.max_requests_per_connection));
  srv.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req,
                                                               httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // ours already
    absl::Status s = res.status == 413   ? absl::ResourceExhaustedError("request body too large")
                     : res.status == 404 ? absl::NotFoundError(absl::StrCat("no route ", req.method, " ", req.path))
                     : res.status == 405 ? absl::InvalidArgumentError("method not allowed")
                                         : absl::InvalidArgumentError(absl::StrCat("HTTP ", res.status));
    SendError(res, s, res.status);
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
    SendError(res, absl::InternalError(what));
  });
}

// Refuses to take over a socket a live daemon answers on; removes a stale one.
absl::Status PrepareSocketPath(const std::string& path) {
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path too long: ", path));
  }
  const auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = path.substr(0, slash);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoToStatus(absl::StrCat("mkdir ", dir));
    if (::chmod(dir.c_str(), 0700) != 0) return ErrnoToStatus(absl::StrCat("chmod ", dir));
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " exists and is not a socket"));
  }
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path.c_str(), path.size());
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    return absl::AlreadyExistsError(absl::StrCat("a daemon already listens on ", path));
  }
  if (::unlink(path.c_str()) != 0) return ErrnoToStatus(absl::StrCat("unlink stale ", path));
  return absl::OkStatus();
}

}  // namespace

bool TokenMatches(const std::string& header_value, const std::string& token) {
  const std::string prefix = "Bearer ";
  if (token.empty()) return false;
  std::string presented = header_value.rfind(prefix, 0) == 0 ? header_value.substr(prefix.size()) : "";
  // Constant time in the token's length: every byte is compared.
  unsigned char diff = presented.size() == token.size() ? 0 : 1;
  for (size_t i = 0; i < token.size(); ++i) {
    unsigned char p = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    diff |= static_cast<unsigned char>(p ^ static_cast<unsigned char>(token[i]));
  }
  return diff == 0;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(Service* service, HttpOptions options) {
  std::unique_ptr<HttpServer> hs(new HttpServer());
  hs->guard_metrics_ = std::make_shared<GuardMetrics>();
  hs->watch_streams_ = std::make_shared<WatchStreams>(options.max_watch_streams);
  if (options.socket_path.empty() && options.tcp_host.empty()) {
    return absl::InvalidArgumentError("no socket and no TCP address to listen on");
  }
  if (!options.socket_path.empty()) {
    DSEC_RETURN_IF_ERROR(PrepareSocketPath(options.socket_path));
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<GuardedServer> srv,
                          GuardedServer::Create(GuardOptionsOf(options), hs->guard_metrics_));
    Configure(*srv, options);
    AddRoutes(*srv, service, options, hs->guard_metrics_, hs->watch_streams_);
    srv->set_address_family(AF_UNIX);
    auto listener = RecordListener(*srv);
    if (!srv->bind_to_port(options.socket_path, 80)) {
      return absl::InternalError(absl::StrCat("cannot listen on ", options.socket_path));
    }
    DSEC_RETURN_IF_ERROR(WidenBacklog(*listener, options.socket_path));
    if (::chmod(options.socket_path.c_str(), 0600) != 0) return ErrnoToStatus("chmod socket");
    hs->socket_path_ = options.socket_path;
    GuardedServer* raw = srv.get();
    hs->servers_.push_back(std::move(srv));
    hs->threads_.emplace_back([raw] { raw->listen_after_bind(); });
  }
  if (!options.tcp_host.empty()) {
    if (options.token.empty()) return absl::InvalidArgumentError("TCP needs a token (--token-file)");
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<GuardedServer> srv,
                          GuardedServer::Create(GuardOptionsOf(options), hs->guard_metrics_));
    Configure(*srv, options);
    const std::string token = options.token;
    srv->set_pre_routing_handler([token](const httplib::Request& req, httplib::Response& res) {
      if (TokenMatches(req.get_header_value("Authorization"), token)) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      res.set_header("WWW-Authenticate", "Bearer");
      SendError(res, absl::UnauthenticatedError("missing or wrong bearer token"));
      return httplib::Server::HandlerResponse::Handled;
    });
    AddRoutes(*srv, service, options, hs->guard_metrics_, hs->watch_streams_);
    auto listener = RecordListener(*srv);
    if (options.tcp_port == 0) {
      int port = srv->bind_to_any_port(options.tcp_host);
      if (port <= 0) return absl::InternalError(absl::StrCat("cannot listen on ", options.tcp_host));
      hs->tcp_port_ = port;
    } else {
      if (!srv->bind_to_port(options.tcp_host, options.tcp_port)) {
        return absl::InternalError(absl::StrCat("cannot listen on ", options.tcp_host, ":", options.tcp_port));
      }
      hs->tcp_port_ = options.tcp_port;
    }
    DSEC_RETURN_IF_ERROR(WidenBacklog(*listener, absl::StrCat(options.tcp_host, ":", hs->tcp_port_)));
    GuardedServer* raw = srv.get();
    hs->servers_.push_back(std::move(srv));
    hs->threads_.emplace_back([raw] { raw->listen_after_bind(); });
  }
  // httplib's stop() is a no-op until the listener thread has entered its
  // accept loop: wait for that, so that a Stop right after Start cannot
  // leave a listener running. No event says so (0.11.4 has no
  // wait_until_ready, and the socket accepts connections into its backlog
  // before the loop runs), so the flag is re-read every 200 us until a
  // deadline; the loop is entered within microseconds.
  const int64_t deadline = MonotonicNowNs() + 10'000'000'000;
  for (auto& s : hs->servers_) {
    while (!s->is_running()) {
      if (MonotonicNowNs() > deadline) return absl::InternalError("the HTTP listener did not start");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  return hs;
}

void HttpServer::Stop() {
  // Open watch streams end (their workers return), so that the pools can
  // be joined. The guards first: their threads hand connections to the
  // servers' pools, which stop() ends.
  if (watch_streams_ != nullptr) watch_streams_->CloseAll();
  for (auto& s : servers_) s->Shutdown();
  for (auto& s : servers_) s->stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  if (!socket_path_.empty()) {
    ::unlink(socket_path_.c_str());
    socket_path_.clear();
  }
}

HttpServer::~HttpServer() { Stop(); }

}  // namespace dsec::daemon
