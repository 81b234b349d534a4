// SPDX-License-Identifier: Apache-2.0
// envd's filesystem service (filesystem.proto, Connect with the JSON
// codec) and its file transfer routes (GET/POST /files) over the node's
// files API (daemon::Service ReadFile, WriteFile, ListFiles: the tier's
// checked access to the sandbox's root). MakeDir, Remove and Move have no
// files-API call: they run mkdir/rm/mv in the sandbox through the node's
// exec path (so they need those programs in the template, and count as
// execs). WatchDir streams a directory's changes, CreateWatcher and
// GetWatcherEvents poll them (Service::WatchDir: the container tier's
// inotify; 501 on tiers that cannot watch).
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/status.h"
#include "sandbox/daemon/http_parse.h"
#include "sandbox/e2b/connect.h"
#include "sandbox/e2b/server_internal.h"

namespace dsec::e2b {

using nlohmann::json;

namespace {

std::string Join(const std::string& dir, const std::string& name) {
  return dir == "/" ? absl::StrCat("/", name) : absl::StrCat(dir, "/", name);
}

absl::StatusOr<json> Stat(daemon::Service* svc, const std::string& id, const std::string& path) {
  if (path == "/") return EntryInfoJson("/", json{{"name", "/"}, {"type", "dir"}, {"size", 0}, {"mode", 0755}});
  auto list = svc->ListFiles(id, ParentOf(path));
  if (!list.ok()) {
    if (absl::IsNotFound(list.status()) || absl::IsInvalidArgument(list.status())) {
      return absl::NotFoundError(absl::StrCat("no such file or directory: ", path));
    }
    return list.status();
  }
  const std::string name = BaseName(path);
  for (const json& e : (*list)["entries"]) {
    if (e.value("name", std::string()) == name) return EntryInfoJson(path, e);
  }
  return absl::NotFoundError(absl::StrCat("no such file or directory: ", path));
}

absl::Status Walk(daemon::Service* svc, const std::string& id, const std::string& dir, uint32_t depth, size_t max,
                  json* out) {
  auto list = svc->ListFiles(id, dir);
  if (!list.ok()) return list.status();
  for (const json& e : (*list)["entries"]) {
    if (out->size() >= max) return absl::ResourceExhaustedError(absl::StrCat("more than ", max, " entries"));
    const std::string p = Join(dir, e.value("name", std::string()));
    out->push_back(EntryInfoJson(p, e));
    if (depth > 1 && e.value("type", std::string()) == "dir") DSEC_RETURN_IF_ERROR(Walk(svc, id, p, depth - 1, max, out));
  }
  return absl::OkStatus();
}

// Runs a file command in the sandbox through the node's exec path.
absl::Status RunTool(daemon::Service* svc, const std::string& id, std::vector<std::string> argv) {
  auto r = svc->Exec(id, json{{"argv", argv}, {"timeout_s", 60}});
  if (!r.ok()) return r.status();
  const json& code = (*r)["exit_code"];
  if (code.is_number_integer() && code.get<int>() == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(argv[0], " failed: ", (*r).value("stderr", std::string())));
}

void SendEnvdError(httplib::Response& res, const absl::Status& s) {
  SendApiError(res, ApiHttpStatus(s.code()), s.message());
}

void GetFile(E2bServer::State* st, const httplib::Request& req, httplib::Response& res) {
  if (!req.has_param("path") || req.get_param_value("path").empty()) {
    return SendApiError(res, 400, "path is required");
  }
  auto data = st->svc->ReadFile(EnvdSandboxOf(req), AbsolutePath(req.get_param_value("path")));
  if (!data.ok()) return SendEnvdError(res, data.status());
  res.status = 200;
  res.set_content(*std::move(data), "application/octet-stream");
}

void PostFiles(E2bServer::State* st, const httplib::Request& req, httplib::Response& res) {
  const std::string id = EnvdSandboxOf(req);
  const std::string query_path = req.has_param("path") ? req.get_param_value("path") : "";
  std::vector<std::pair<std::string, const std::string*>> writes;  // path, data
  if (req.is_multipart_form_data()) {
    for (const auto& [field, f] : req.files) {
      if (field != "file") continue;
      std::string target = !query_path.empty() && req.files.size() == 1 ? query_path : f.filename;
      if (target.empty()) target = query_path;
      if (target.empty()) return SendApiError(res, 400, "a file part without a path (filename or ?path=)");
      writes.emplace_back(AbsolutePath(target), &f.content);
    }
    if (writes.empty()) return SendApiError(res, 400, "no 'file' part in the form");
  } else {
    if (req.has_header("Content-Encoding") && req.get_header_value("Content-Encoding") != "identity") {
      return SendApiError(res, 501, "Content-Encoding of uploads (gzip) is not supported by dsec-vmm's E2B API");
    }
    if (query_path.empty()) return SendApiError(res, 400, "path is required");
    writes.emplace_back(AbsolutePath(query_path), &req.body);
  }
  json written = json::array();
  for (const auto& [path, data] : writes) {
    if (data->size() > st->options.max_file_bytes) return SendApiError(res, 413, "file over the upload limit");
    if (absl::Status s = st->svc->WriteFile(id, path, "", *data); !s.ok()) return SendEnvdError(res, s);
    written.push_back(json{{"name", BaseName(path)}, {"type", "file"}, {"path", path}});
  }
  SendJson(res, written);
}

const char* EventTypeName(FileEvent::Type t) {
  switch (t) {
    case FileEvent::Type::kCreate: return "EVENT_TYPE_CREATE";
    case FileEvent::Type::kWrite: return "EVENT_TYPE_WRITE";
    case FileEvent::Type::kRemove: return "EVENT_TYPE_REMOVE";
    case FileEvent::Type::kRename: return "EVENT_TYPE_RENAME";
    case FileEvent::Type::kChmod: return "EVENT_TYPE_CHMOD";
  }
  return "EVENT_TYPE_UNSPECIFIED";
}

json FilesystemEventJson(const FileEvent& e) {
  return json{{"name", daemon::ToValidUtf8(e.name)}, {"type", EventTypeName(e.type)}};
}

// Without the client's own keepalive interval, one every this often: a
// client that went away is noticed at the next write, so a watch stream
// ends within this of its client.
constexpr int64_t kWatchKeepaliveMs = 30'000;

// filesystem.WatchDir: (WatchDirResponse's oneof, unwrapped in JSON) the
// start event, the directory's events as they
// come (a keepalive after each quiet interval), and the end of the stream
// with the error that ended the watch (its directory went, events were
// lost, the sandbox went).
void WatchDir(E2bServer::State* st, const httplib::Request& req, httplib::Response& res) {
  const std::string id = EnvdSandboxOf(req);
  auto body = StreamRequest(st, req, res);
  if (!body.ok()) return;
  auto w = ParseWatchRequest(*body);
  if (!w.ok()) return EndStreamNow(res, w.status());
  // Each open stream holds one of the server's threads.
  struct Slot {
    explicit Slot(E2bServer::State* st) : watch(&st->watch_streams), open(&st->open_streams) {}
    StreamCount watch, open;
  };
  auto slot = std::make_shared<Slot>(st);
  if (st->watch_streams.load() > st->options.max_watch_streams) {
    return EndStreamNow(res, absl::ResourceExhaustedError(absl::StrCat(
                                 "this server streams ", st->options.max_watch_streams,
                                 " directory watches at once, the most it does (CreateWatcher's polled "
                                 "watchers are not limited so)")));
  }
  absl::StatusOr<std::shared_ptr<DirWatch>> made = st->svc->WatchDir(id, w->path, w->recursive);
  if (!made.ok()) return EndStreamNow(res, made.status());
  std::shared_ptr<DirWatch> watch = *std::move(made);
  {
    std::lock_guard<std::mutex> lock(st->streams_mu);
    std::erase_if(st->stream_watches, [](const std::weak_ptr<DirWatch>& w) { return w.expired(); });
    st->stream_watches.push_back(watch);
    if (st->stopping) watch->Close();
  }
  const int64_t asked = KeepaliveMs(req);
  const int64_t keepalive_ms = asked > 0 ? std::min(asked, kWatchKeepaliveMs) : kWatchKeepaliveMs;
  struct Progress {
    bool started = false;
    bool ended = false;
  };
  auto progress = std::make_shared<Progress>();
  res.status = 200;
  res.set_chunked_content_provider(
      kConnectJsonType,
      [watch, slot, progress, keepalive_ms](size_t, httplib::DataSink& sink) {
        if (progress->ended) {
          sink.done();
          return true;
        }
        std::string out;
        if (!progress->started) {
          progress->started = true;
          out = MessageEnvelope(json{{"start", json::object()}});
        } else {
          const int64_t deadline = MonotonicNowMs() + keepalive_ms;
          absl::StatusOr<std::vector<FileEvent>> events;
          do {
            events = watch->Next(std::max<int64_t>(0, deadline - MonotonicNowMs()));
          } while (events.ok() && events->empty() && MonotonicNowMs() < deadline);
          if (!events.ok()) {
            out = EndStreamEnvelope(events.status());
            progress->ended = true;
          } else if (events->empty()) {
            out = MessageEnvelope(json{{"keepalive", json::object()}});
          } else {
            for (const FileEvent& e : *events) {
              out += MessageEnvelope(json{{"filesystem", FilesystemEventJson(e)}});
            }
          }
        }
        return sink.write(out.data(), out.size());
      },
      [watch](bool) { watch->Close(); });
}

void Unary(httplib::Server& srv, E2bServer::State* st, const std::string& method, UnaryFn fn) {
  srv.Post(absl::StrCat("/filesystem.Filesystem/", method),
           [st, fn](const httplib::Request& req, httplib::Response& res) { ServeUnary(st, req, res, fn); });
}

}  // namespace

void AddFilesystemRoutes(httplib::Server& srv, E2bServer::State* st) {
  srv.Get("/files", [st](const httplib::Request& req, httplib::Response& res) { GetFile(st, req, res); });
  srv.Post("/files", [st](const httplib::Request& req, httplib::Response& res) { PostFiles(st, req, res); });
  daemon::Service* svc = st->svc;
  Unary(srv, st, "Stat", [svc](const std::string& id, const json& body) -> absl::StatusOr<json> {
    DSEC_ASSIGN_OR_RETURN(std::string path, ParsePathField(body, "path"));
    DSEC_ASSIGN_OR_RETURN(json entry, Stat(svc, id, path));
    return json{{"entry", entry}};
  });
  const size_t max_entries = st->options.max_list_entries;
  const uint32_t max_depth = st->options.max_list_depth;
  Unary(srv, st, "ListDir", [svc, max_entries, max_depth](const std::string& id, const json& body)
                                -> absl::StatusOr<json> {
    DSEC_ASSIGN_OR_RETURN(std::string path, ParsePathField(body, "path"));
    DSEC_ASSIGN_OR_RETURN(uint32_t depth, ParseDepth(body, max_depth));
    json entries = json::array();
    DSEC_RETURN_IF_ERROR(Walk(svc, id, path, depth, max_entries, &entries));
    return json{{"entries", entries}};
  });
  Unary(srv, st, "MakeDir", [svc](const std::string& id, const json& body) -> absl::StatusOr<json> {
    DSEC_ASSIGN_OR_RETURN(std::string path, ParsePathField(body, "path"));
    if (Stat(svc, id, path).ok()) return absl::AlreadyExistsError(absl::StrCat(path, " already exists"));
    DSEC_RETURN_IF_ERROR(RunTool(svc, id, {"mkdir", "-p", "--", path}));
    DSEC_ASSIGN_OR_RETURN(json entry, Stat(svc, id, path));
    return json{{"entry", entry}};
  });
  Unary(srv, st, "Remove", [svc](const std::string& id, const json& body) -> absl::StatusOr<json> {
    DSEC_ASSIGN_OR_RETURN(std::string path, ParsePathField(body, "path"));
    if (path == "/") return absl::InvalidArgumentError("will not remove /");
    DSEC_RETURN_IF_ERROR(Stat(svc, id, path).status());
    DSEC_RETURN_IF_ERROR(RunTool(svc, id, {"rm", "-rf", "--", path}));
    return json::object();
  });
  Unary(srv, st, "Move", [svc](const std::string& id, const json& body) -> absl::StatusOr<json> {
    DSEC_ASSIGN_OR_RETURN(std::string from, ParsePathField(body, "source"));
    DSEC_ASSIGN_OR_RETURN(std::string to, ParsePathField(body, "destination"));
    DSEC_RETURN_IF_ERROR(Stat(svc, id, from).status());
    DSEC_RETURN_IF_ERROR(RunTool(svc, id, {"mv", "-f", "--", from, to}));
    DSEC_ASSIGN_OR_RETURN(json entry, Stat(svc, id, to));
    return json{{"entry", entry}};
  });
  Unary(srv, st, "CreateWatcher", [st](const std::string& id, const json& body) -> absl::StatusOr<json> {
    DSEC_ASSIGN_OR_RETURN(WatchRequest w, ParseWatchRequest(body));
    std::shared_ptr<Record> rec = st->Find(id);
    if (rec == nullptr) return absl::UnavailableError("the sandbox is gone");
    DSEC_ASSIGN_OR_RETURN(std::shared_ptr<DirWatch> watch, st->svc->WatchDir(id, w.path, w.recursive));
    std::lock_guard<std::mutex> lock(rec->mu);
    const std::string watcher_id = absl::StrCat("w", rec->next_watcher++);
    rec->watchers[watcher_id] = std::move(watch);
    return json{{"watcherId", watcher_id}};
  });
  Unary(srv, st, "GetWatcherEvents", [st](const std::string& id, const json& body) -> absl::StatusOr<json> {
    DSEC_ASSIGN_OR_RETURN(std::string watcher_id, ParseWatcherId(body));
    std::shared_ptr<Record> rec = st->Find(id);
    if (rec == nullptr) return absl::UnavailableError("the sandbox is gone");
    std::shared_ptr<DirWatch> watch;
    {
      std::lock_guard<std::mutex> lock(rec->mu);
      auto it = rec->watchers.find(watcher_id);
      if (it == rec->watchers.end()) return absl::NotFoundError(absl::StrCat("no watcher ", watcher_id));
      watch = it->second;
    }
    absl::StatusOr<std::vector<FileEvent>> events = watch->Next(0);
    if (!events.ok()) {
      // The watch ended (its directory went, events were lost): so does
      // the watcher, and the error says why.
      std::lock_guard<std::mutex> lock(rec->mu);
      rec->watchers.erase(watcher_id);
      return events.status();
    }
    json list = json::array();
    for (const FileEvent& e : *events) list.push_back(FilesystemEventJson(e));
    return json{{"events", list}};
  });
  Unary(srv, st, "RemoveWatcher", [st](const std::string& id, const json& body) -> absl::StatusOr<json> {
    DSEC_ASSIGN_OR_RETURN(std::string watcher_id, ParseWatcherId(body));
    std::shared_ptr<Record> rec = st->Find(id);
    if (rec == nullptr) return absl::UnavailableError("the sandbox is gone");
    std::shared_ptr<DirWatch> gone;  // released outside the lock
    std::lock_guard<std::mutex> lock(rec->mu);
    auto it = rec->watchers.find(watcher_id);
    if (it == rec->watchers.end()) return absl::NotFoundError(absl::StrCat("no watcher ", watcher_id));
    gone = std::move(it->second);
    rec->watchers.erase(it);
    return json::object();
  });
  srv.Post("/filesystem.Filesystem/WatchDir",
           [st](const httplib::Request& req, httplib::Response& res) { WatchDir(st, req, res); });
}

}  // namespace dsec::e2b
