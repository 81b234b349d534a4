// SPDX-License-Identifier: Apache-2.0
// E2B's control plane (e2b-dev/infra spec/openapi.yml, the calls the SDKs
// make) over daemon::Service: sandboxes made from templates, their
// timeouts as the node's TTLs, pause/resume as the tier's. Everything
// else the spec has is 501 naming it (docs/e2b.md).
#include <sys/random.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/logging.h"
#include "base/status.h"
#include "sandbox/daemon/http_parse.h"
#include "sandbox/e2b/server_internal.h"

namespace dsec::e2b {

using nlohmann::json;

namespace {

std::string RandomToken() {
  unsigned char bytes[24];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    DSEC_CHECK(n > 0 || errno == EINTR);  // getrandom cannot fail once the pool is ready
    if (n > 0) got += static_cast<size_t>(n);
  }
  std::string out;
  for (unsigned char b : bytes) absl::StrAppend(&out, absl::Hex(b, absl::kZeroPad2));
  return out;
}

std::string Rfc3339(int64_t unix_ms) {
  const time_t secs = static_cast<time_t>(unix_ms / 1000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char buf[32];
  strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  return absl::StrCat(buf, ".", absl::Dec(unix_ms % 1000, absl::kZeroPad3), "Z");
}

std::string PercentDecode(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i] == '+' ? ' ' : s[i]);
    }
  }
  return out;
}

// What the SDK reads after create and connect (NewSandbox's answer).
json SandboxJson(const E2bOptions& o, const Record& r) {
  return json{{"templateID", r.template_id},    {"sandboxID", r.id},
              {"alias", r.template_id},         {"clientID", o.client_id},
              {"envdVersion", kEnvdVersion},    {"envdAccessToken", r.access_token},
              {"trafficAccessToken", nullptr},  {"domain", nullptr}};
}

// SandboxDetail / ListedSandbox, from the record and the node's view.
json DetailJson(const E2bOptions& o, const Record& r, const json& node) {
  json j = SandboxJson(o, r);
  const int64_t started = node.value("created_unix_ms", r.started_ms);
  const json& expires = node.contains("expires_unix_ms") ? node["expires_unix_ms"] : json(nullptr);
  const double cpus = node.value("cpus", 0.0);
  j["startedAt"] = Rfc3339(started);
  j["endAt"] = Rfc3339(expires.is_number_integer() ? expires.get<int64_t>() : started);
  j["cpuCount"] = cpus > 0 ? static_cast<int>(std::ceil(cpus)) : static_cast<int>(std::thread::hardware_concurrency());
  j["memoryMB"] = node.value("memory_mib", uint64_t{0});
  j["diskSizeMB"] = 0;
  j["metadata"] = r.metadata;
  j["state"] = node.value("state", std::string("running"));
  j["volumeMounts"] = json::array();
  return j;
}

absl::StatusOr<Template> FindTemplate(const E2bOptions& o, const std::string& name) {
  std::map<std::string, Template> all = o.templates;
  if (!o.templates_file.empty()) {
    auto from_file = ReadTemplateFile(o.templates_file);
    if (!from_file.ok()) return from_file.status();
    for (auto& [n, t] : *from_file) all[n] = std::move(t);
  }
  if (auto it = all.find(name); it != all.end()) return it->second;
  if (name == o.default_template) return Template{name, "container", {}, std::nullopt, std::nullopt, std::nullopt};
  std::vector<std::string> names = {o.default_template};
  for (const auto& [n, t] : all) names.push_back(n);
  return absl::NotFoundError(
      absl::StrCat("template '", name, "' not found on this node (it has: ", absl::StrJoin(names, ", "), ")"));
}

absl::StatusOr<json> Body(const httplib::Request& req, size_t limit) {
  return daemon::ParseJsonBody(req.body, limit);
}

void Create(E2bServer::State* st, const httplib::Request& req, httplib::Response& res) {
  auto body = Body(req, st->options.max_json_bytes);
  if (!body.ok()) return SendApiStatus(res, body.status());
  auto r = ParseCreateRequest(*body, st->options.max_sandbox_timeout_s);
  if (!r.ok()) return SendApiStatus(res, r.status());
  auto t = FindTemplate(st->options, r->template_id);
  if (!t.ok()) return SendApiStatus(res, t.status());
  auto node = st->svc->Create(NodeCreateBody(*t, r->timeout_s, r->task_id));
  if (!node.ok()) return SendApiStatus(res, node.status());
  auto rec = std::make_shared<Record>();
  rec->id = (*node)["id"].get<std::string>();
  rec->template_id = r->template_id;
  rec->access_token = RandomToken();
  rec->metadata = r->metadata;
  rec->env_vars = r->env_vars;
  rec->started_ms = node->value("created_unix_ms", int64_t{0});
  st->Add(rec);
  SendJson(res, SandboxJson(st->options, *rec), 201);
}

// The record and node view of a path's sandbox, or the 404 answered.
std::shared_ptr<Record> Lookup(E2bServer::State* st, const std::string& id, httplib::Response& res, json* node) {
  std::shared_ptr<Record> rec = st->Find(id);
  absl::StatusOr<json> n = rec ? st->svc->Get(id) : absl::NotFoundError("");
  if (rec == nullptr || !n.ok()) {
    SendApiError(res, 404, absl::StrCat("sandbox ", id, " not found"));
    return nullptr;
  }
  if (node != nullptr) *node = *std::move(n);
  return rec;
}

bool Matches(const json& detail, const httplib::Request& req) {
  if (req.has_param("template") && detail["templateID"] != req.get_param_value("template")) return false;
  if (req.has_param("state")) {
    bool any = false;
    for (absl::string_view s : absl::StrSplit(req.get_param_value("state"), ',', absl::SkipEmpty())) {
      any |= detail["state"] == std::string(s);
    }
    if (!any) return false;
  }
  if (req.has_param("metadata")) {
    for (absl::string_view pair : absl::StrSplit(req.get_param_value("metadata"), '&', absl::SkipEmpty())) {
      const std::pair<std::string, std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
      const std::string k = PercentDecode(kv.first), v = PercentDecode(kv.second);
      if (!detail["metadata"].contains(k) || detail["metadata"][k] != v) return false;
    }
  }
  return true;
}

void List(E2bServer::State* st, const httplib::Request& req, httplib::Response& res, bool v2) {
  std::vector<json> items;
  for (const auto& rec : st->All()) {
    auto node = st->svc->Get(rec->id);
    if (!node.ok()) continue;
    json d = DetailJson(st->options, *rec, *node);
    if (v2 && !Matches(d, req)) continue;
    if (!v2 && d["state"] != "running") continue;  // v1 lists running ones
    items.push_back(std::move(d));
  }
  std::sort(items.begin(), items.end(), [](const json& a, const json& b) {
    return std::make_pair(a["startedAt"].get<std::string>(), a["sandboxID"].get<std::string>()) <
           std::make_pair(b["startedAt"].get<std::string>(), b["sandboxID"].get<std::string>());
  });
  size_t begin = 0, limit = items.size();
  if (v2 && req.has_param("nextToken")) {
    const std::string token = req.get_param_value("nextToken");
    while (begin < items.size() && items[begin]["sandboxID"] != token) ++begin;
  }
  if (v2 && req.has_param("limit")) {
    int64_t l = 0;
    if (!absl::SimpleAtoi(req.get_param_value("limit"), &l) || l < 1 || l > 100) {
      return SendApiError(res, 400, "limit: must be an integer in [1, 100]");
    }
    limit = static_cast<size_t>(l);
  }
  json page = json::array();
  for (size_t i = begin; i < items.size() && page.size() < limit; ++i) page.push_back(items[i]);
  if (begin + page.size() < items.size()) res.set_header("X-Next-Token", items[begin + page.size()]["sandboxID"]);
  SendJson(res, page);
}

// Extends a sandbox's TTL to at least `timeout_s` from now (connect's rule:
// never shortens).
absl::Status Extend(E2bServer::State* st, const std::string& id, const json& node, int64_t timeout_s) {
  const json& x = node.contains("expires_unix_ms") ? node["expires_unix_ms"] : json(nullptr);
  const int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  if (x.is_number_integer() && x.get<int64_t>() >= now_ms + timeout_s * 1000) return absl::OkStatus();
  return st->svc->SetTtl(id, timeout_s).status();
}

void Connect(E2bServer::State* st, const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  json node;
  std::shared_ptr<Record> rec = Lookup(st, id, res, &node);
  if (rec == nullptr) return;
  auto body = Body(req, st->options.max_json_bytes);
  if (!body.ok()) return SendApiStatus(res, body.status());
  auto timeout = ParseSecondsField(*body, "timeout", st->options.max_sandbox_timeout_s);
  if (!timeout.ok()) return SendApiStatus(res, timeout.status());
  int status = 200;
  if (node.value("state", std::string()) == "paused") {
    if (auto r = st->svc->Resume(id); !r.ok()) return SendApiStatus(res, r.status());
    status = 201;
  }
  if (*timeout) {
    if (absl::Status s = Extend(st, id, node, **timeout); !s.ok()) return SendApiStatus(res, s);
  }
  SendJson(res, SandboxJson(st->options, *rec), status);
}

// E2B forks a running sandbox with its memory; the node forks its files
// (Service::Fork, POST /v1/sandboxes/{id}/fork): the children start from
// the parent's files with no processes. Each child is an E2B sandbox of
// the parent's template, metadata (but its task) and envs.
void Fork(E2bServer::State* st, const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  std::shared_ptr<Record> parent = Lookup(st, id, res, nullptr);
  if (parent == nullptr) return;
  auto body = Body(req, st->options.max_json_bytes);
  if (!body.ok()) return SendApiStatus(res, body.status());
  auto timeout = ParseSecondsField(*body, "timeout", st->options.max_sandbox_timeout_s);
  if (!timeout.ok()) return SendApiStatus(res, timeout.status());
  auto count = ParseSecondsField(*body, "count", 64);
  if (!count.ok()) return SendApiStatus(res, count.status());
  json node_body = {{"count", count->value_or(1)}, {"ttl_s", std::max<int64_t>(1, timeout->value_or(15))}};
  auto forked = st->svc->Fork(id, node_body);
  if (!forked.ok()) return SendApiStatus(res, forked.status());
  json results = json::array();
  for (const json& child : (*forked)["sandboxes"]) {
    auto rec = std::make_shared<Record>();
    rec->id = child.value("id", std::string());
    rec->template_id = parent->template_id;
    rec->access_token = RandomToken();
    rec->metadata = parent->metadata;
    rec->metadata.erase(kTaskMetadataKey);  // the node carries no trajectory to children
    rec->env_vars = parent->env_vars;
    rec->started_ms = child.value("created_unix_ms", int64_t{0});
    st->Add(rec);
    results.push_back(json{{"sandbox", SandboxJson(st->options, *rec)}});
  }
  SendJson(res, results, 201);
}

void SetTimeout(E2bServer::State* st, const httplib::Request& req, httplib::Response& res, const char* field) {
  const std::string id = req.matches[1];
  if (Lookup(st, id, res, nullptr) == nullptr) return;
  auto body = Body(req, st->options.max_json_bytes);
  if (!body.ok()) return SendApiStatus(res, body.status());
  auto seconds = ParseSecondsField(*body, field, st->options.max_sandbox_timeout_s);
  if (!seconds.ok()) return SendApiStatus(res, seconds.status());
  if (!*seconds) return SendApiError(res, 400, absl::StrCat(field, " is required"));
  if (auto r = st->svc->SetTtl(id, **seconds); !r.ok()) return SendApiStatus(res, r.status());
  res.status = 204;
}

void NotSupported(httplib::Server& srv, const std::string& pattern, const std::string& what) {
  auto h = [what](const httplib::Request& req, httplib::Response& res) {
    SendApiError(res, 501, absl::StrCat(req.method, " ", req.path, ": ", what,
                                        " is not supported by dsec-vmm's E2B API (docs/e2b.md)"));
  };
  srv.Get(pattern, h);
  srv.Post(pattern, h);
  srv.Put(pattern, h);
  srv.Patch(pattern, h);
  srv.Delete(pattern, h);
}

}  // namespace

void AddControlPlaneRoutes(httplib::Server& srv, E2bServer::State* st) {
  srv.Get("/health", [](const httplib::Request& req, httplib::Response& res) {
    if (!EnvdSandboxOf(req).empty()) {  // envd's: no content
      res.status = 204;
      return;
    }
    SendJson(res, json{{"message", "Health check successful"}});
  });
  for (const char* path : {"/sandboxes", "/v2/sandboxes"}) {
    srv.Post(path, [st](const httplib::Request& req, httplib::Response& res) { Create(st, req, res); });
  }
  srv.Get("/sandboxes", [st](const httplib::Request& req, httplib::Response& res) { List(st, req, res, false); });
  srv.Get("/v2/sandboxes", [st](const httplib::Request& req, httplib::Response& res) { List(st, req, res, true); });
  NotSupported(srv, "/sandboxes/metrics", "metrics of many sandboxes");
  srv.Get(R"(/sandboxes/([^/]+))", [st](const httplib::Request& req, httplib::Response& res) {
    json node;
    std::shared_ptr<Record> rec = Lookup(st, req.matches[1], res, &node);
    if (rec != nullptr) SendJson(res, DetailJson(st->options, *rec, node));
  });
  srv.Delete(R"(/sandboxes/([^/]+))", [st](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (Lookup(st, id, res, nullptr) == nullptr) return;
    absl::Status s = st->svc->Delete(id);
    st->Forget(id);
    if (!s.ok() && !absl::IsNotFound(s)) return SendApiStatus(res, s);
    if (absl::IsNotFound(s)) return SendApiError(res, 404, absl::StrCat("sandbox ", id, " not found"));
    res.status = 204;
  });
  srv.Post(R"(/sandboxes/([^/]+)/timeout)", [st](const httplib::Request& req, httplib::Response& res) {
    SetTimeout(st, req, res, "timeout");
  });
  srv.Post(R"(/sandboxes/([^/]+)/refreshes)", [st](const httplib::Request& req, httplib::Response& res) {
    SetTimeout(st, req, res, "duration");
  });
  srv.Post(R"(/sandboxes/([^/]+)/pause)", [st](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    json node;
    if (Lookup(st, id, res, &node) == nullptr) return;
    if (node.value("state", std::string()) == "paused") {
      return SendApiError(res, 409, absl::StrCat("sandbox ", id, " is already paused"));
    }
    if (auto r = st->svc->Pause(id); !r.ok()) return SendApiStatus(res, r.status());
    res.status = 204;
  });
  srv.Post(R"(/sandboxes/([^/]+)/resume)", [st](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    json node;
    std::shared_ptr<Record> rec = Lookup(st, id, res, &node);
    if (rec == nullptr) return;
    if (node.value("state", std::string()) != "paused") {
      return SendApiError(res, 409, absl::StrCat("sandbox ", id, " is not paused"));
    }
    if (auto r = st->svc->Resume(id); !r.ok()) return SendApiStatus(res, r.status());
    SendJson(res, SandboxJson(st->options, *rec), 201);
  });
  for (const char* p : {R"(/sandboxes/([^/]+)/connect)", R"(/v2/sandboxes/([^/]+)/connect)"}) {
    srv.Post(p, [st](const httplib::Request& req, httplib::Response& res) { Connect(st, req, res); });
  }
  NotSupported(srv, R"(/sandboxes/([^/]+)/metrics)", "sandbox metrics");
  NotSupported(srv, R"(/(v2/)?sandboxes/([^/]+)/logs)", "sandbox logs");
  srv.Post(R"(/sandboxes/([^/]+)/fork)", [st](const httplib::Request& req, httplib::Response& res) {
    Fork(st, req, res);
  });
  NotSupported(srv, R"(/sandboxes/([^/]+)/snapshots)", "snapshots");
  NotSupported(srv, R"(/sandboxes/([^/]+)/network)", "changing a sandbox's network");
  NotSupported(srv, R"(/snapshots(/.*)?)", "snapshots");
  NotSupported(srv, R"(/(v[0-9]+/)?templates(/.*)?)", "building or managing templates over the API (a node's "
                                                     "templates are its --e2b-template flags and template file)");
  NotSupported(srv, R"(/secrets(/.*)?)", "secrets");
  NotSupported(srv, R"(/volumes(/.*)?)", "volumes");
  NotSupported(srv, R"(/volumecontent(/.*)?)", "volumes");
  NotSupported(srv, R"(/teams(/.*)?)", "teams");
  NotSupported(srv, R"(/(access-tokens|api-keys)(/.*)?)", "managing keys over the API");
  NotSupported(srv, R"(/nodes(/.*)?)", "cluster nodes");
}

}  // namespace dsec::e2b
