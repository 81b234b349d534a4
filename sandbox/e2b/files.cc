// SPDX-License-Identifier: Apache-2.0
// envd's filesystem service (filesystem.proto, Connect with the JSON
// codec) and its file transfer routes (GET/POST /files) over the node's
// files API (daemon::Service ReadFile, WriteFile, ListFiles: the tier's
// checked access to the sandbox's root). MakeDir, Remove and Move have no
// files-API call: they run mkdir/rm/mv in the sandbox through the node's
// exec path (so they need those programs in the template, and count as
// execs). Watching is unimplemented (docs/e2b.md).
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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
  for (const char* m : {"CreateWatcher", "GetWatcherEvents", "RemoveWatcher"}) {
    Unary(srv, st, m, [m](const std::string&, const json&) -> absl::StatusOr<json> {
      return absl::UnimplementedError(absl::StrCat("filesystem.Filesystem/", m,
                                                   ": watching directories is not supported by dsec-vmm's E2B API"));
    });
  }
  srv.Post("/filesystem.Filesystem/WatchDir", [](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content(EndStreamEnvelope(absl::UnimplementedError(
                        "filesystem.Filesystem/WatchDir: watching directories is not supported by dsec-vmm's E2B API")),
                    "application/connect+json");
  });
}

}  // namespace dsec::e2b
