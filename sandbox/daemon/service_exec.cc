// SPDX-License-Identifier: Apache-2.0
// Service: exec (live and replayed), the trajectory log, pack_diff and the
// layer store.
#include <chrono>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "sandbox/container/layer_mounts.h"
#include "sandbox/daemon/errors.h"
#include "sandbox/daemon/service.h"
#include "sandbox/daemon/service_internal.h"
#include "sandbox/layers/layer_metadata.h"
#include "sandbox/layers/layer_store.h"
#include "sandbox/layers/pack_diff.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::daemon {

using nlohmann::json;

std::string Base64Encode(const std::string& bytes) { return absl::Base64Escape(bytes); }

absl::StatusOr<std::string> Base64Decode(const std::string& text) {
  std::string out;
  if (!absl::Base64Unescape(text, &out)) return absl::InvalidArgumentError("invalid base64");
  return out;
}

std::string ToValidUtf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned char c = p[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= n;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; ok && k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) ok = false;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid.
    if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
               (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)) {
      ok = false;
    }
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\xef\xbf\xbd";
      i += 1;
    }
  }
  return out;
}

json ExecResultJson(const ExecOutcome& out) {
  json j;
  j["exit_code"] = out.exit_code ? json(*out.exit_code) : json(nullptr);
  j["signal"] = out.signal ? json(*out.signal) : json(nullptr);
  j["timed_out"] = out.timed_out;
  j["killed_by"] = out.killed_by.empty() ? json(nullptr) : json(out.killed_by);
  j["stdout"] = ToValidUtf8(out.stdout_data);
  j["stderr"] = ToValidUtf8(out.stderr_data);
  j["stdout_b64"] = Base64Encode(out.stdout_data);
  j["stderr_b64"] = Base64Encode(out.stderr_data);
  j["stdout_dropped"] = out.stdout_dropped;
  j["stderr_dropped"] = out.stderr_dropped;
  j["duration_ms"] = out.duration_ms;
  j["seq"] = nullptr;
  j["replayed"] = false;
  j["divergence"] = nullptr;
  return j;
}

namespace {

bool ValidTaskIdLocal(const std::string& t) { return trajectory::ValidateTaskId(t).ok(); }

struct ParsedExec {
  ExecSpec spec;
  trajectory::ExecRequest request;
};

absl::StatusOr<ParsedExec> ParseExec(const json& body, const std::string& tier, const std::string& lang,
                                     const ServiceOptions& options) {
  if (!body.is_object()) return absl::InvalidArgumentError("the request body must be a JSON object");
  static const std::set<std::string> kKnown = {"argv", "code", "stdin", "stdin_b64", "env",
                                               "cwd", "timeout_s", "idempotent"};
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (kKnown.count(it.key()) == 0) return InvalidField(it.key(), absl::StrCat("unknown field ", it.key()));
  }
  ParsedExec p;
  if (auto it = body.find("argv"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return InvalidField("argv", "argv must be a list of strings");
    size_t total = 0;
    for (const json& a : *it) {
      if (!a.is_string()) return InvalidField("argv", "argv must be a list of strings");
      std::string s = a.get<std::string>();
      if (s.find('\0') != std::string::npos) return InvalidField("argv", "argv holds a NUL byte");
      total += s.size();
      p.spec.argv.push_back(std::move(s));
    }
    if (p.spec.argv.size() > trajectory::kMaxArgv || total > trajectory::kMaxArgBytes / 2) {
      return InvalidField("argv", "argv is too long");
    }
  }
  if (auto it = body.find("code"); it != body.end() && !it->is_null()) {
    if (tier != "fncall") return InvalidField("code", "code applies to the fncall tier (use argv)");
    if (!it->is_string()) return InvalidField("code", "code must be a string");
    p.spec.code = it->get<std::string>();
    if (p.spec.code.empty()) return InvalidField("code", "code must not be empty");
    if (p.spec.code.size() > trajectory::kMaxArgBytes / 2) return InvalidField("code", "code is too long");
  } else if (tier == "fncall") {
    return InvalidField("code", "code is required for the fncall tier");
  }
  if (tier == "container" && p.spec.argv.empty()) {
    return InvalidField("argv", "argv is required (a non-empty list of strings)");
  }
  bool has_stdin = body.contains("stdin") && !body["stdin"].is_null();
  bool has_b64 = body.contains("stdin_b64") && !body["stdin_b64"].is_null();
  if (has_stdin && has_b64) return InvalidField("stdin_b64", "give stdin or stdin_b64, not both");
  if (has_stdin) {
    if (!body["stdin"].is_string()) return InvalidField("stdin", "stdin must be a string");
    p.spec.stdin_data = body["stdin"].get<std::string>();
  } else if (has_b64) {
    if (!body["stdin_b64"].is_string()) return InvalidField("stdin_b64", "stdin_b64 must be a string");
    auto d = Base64Decode(body["stdin_b64"].get<std::string>());
    if (!d.ok()) return InvalidField("stdin_b64", "stdin_b64 is not valid base64");
    p.spec.stdin_data = std::move(*d);
  }
  if (auto it = body.find("env"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return InvalidField("env", "env must be an object of strings");
    for (auto kv = it->begin(); kv != it->end(); ++kv) {
      const std::string& k = kv.key();
      if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos) {
        return InvalidField("env", absl::StrCat("invalid variable name \"", k, "\""));
      }
      if (!kv->is_string() || kv->get<std::string>().find('\0') != std::string::npos) {
        return InvalidField("env", absl::StrCat("env.", k, " must be a string without NUL"));
      }
      p.spec.env[k] = kv->get<std::string>();
    }
  }
  if (auto it = body.find("cwd"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return InvalidField("cwd", "cwd must be a string");
    p.spec.cwd = it->get<std::string>();
    if (p.spec.cwd.empty() || p.spec.cwd[0] != '/' || p.spec.cwd.size() > 4096 ||
        p.spec.cwd.find('\0') != std::string::npos) {
      return InvalidField("cwd", "cwd must be an absolute path");
    }
  }
  p.spec.timeout_ms = options.default_timeout_s * 1000;
  if (auto it = body.find("timeout_s"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > options.max_timeout_s) {
      return InvalidField("timeout_s", absl::StrCat("timeout_s must be an integer in [1, ", options.max_timeout_s, "]"));
    }
    p.spec.timeout_ms = it->get<int64_t>() * 1000;
  }
  if (auto it = body.find("idempotent"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return InvalidField("idempotent", "idempotent must be true or false");
    p.request.idempotent = it->get<bool>();
  }
  p.spec.output_cap_bytes = options.output_cap_bytes;
  // What identifies the command in the trajectory.
  if (tier == "fncall") {
    p.request.argv = {lang, "-c", p.spec.code};
    p.request.argv.insert(p.request.argv.end(), p.spec.argv.begin(), p.spec.argv.end());
  } else {
    p.request.argv = p.spec.argv;
  }
  p.request.cwd = p.spec.cwd.empty() ? (tier == "fncall" ? "/tmp" : "/") : p.spec.cwd;
  std::vector<std::string> env;
  for (const auto& [k, v] : p.spec.env) env.push_back(absl::StrCat(k, "=", v));
  p.request.env_digest = trajectory::DigestEnv(env);
  p.request.stdin_digest = trajectory::DigestBytes(p.spec.stdin_data);
  return p;
}

ExecOutcome FromRecord(const trajectory::Record& r) {
  ExecOutcome o;
  if (r.result.signal != 0) {
    o.signal = r.result.signal;
  } else {
    o.exit_code = r.result.exit_code;
  }
  o.timed_out = r.result.timed_out;
  if (r.result.timed_out) o.killed_by = "timeout";
  o.stdout_data = r.result.stdout_data;
  o.stderr_data = r.result.stderr_data;
  o.stdout_dropped = r.result.stdout_dropped;
  o.stderr_dropped = r.result.stderr_dropped;
  o.duration_ms = static_cast<double>(r.result.duration_ns) / 1e6;
  return o;
}

}  // namespace

absl::StatusOr<json> Service::Exec(const std::string& id, const json& body, const ExecObserver* observer) {
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, Find(id));
  DSEC_ASSIGN_OR_RETURN(ParsedExec p, ParseExec(body, e->tier, e->lang, options_));
  if (observer != nullptr) p.spec.on_output = observer->on_output;
  if (running_execs_.fetch_add(1) >= options_.max_concurrent_execs) {
    running_execs_.fetch_sub(1);
    metrics_.rejected_limit++;
    return absl::ResourceExhaustedError(
        absl::StrCat("this node runs its maximum of ", options_.max_concurrent_execs, " concurrent execs"));
  }
  struct SlotRelease {
    std::atomic<int>* n;
    ~SlotRelease() { n->fetch_sub(1); }
  } slot{&running_execs_};
  std::lock_guard<std::mutex> lock(e->mu);
  if (e->destroyed) return absl::NotFoundError(absl::StrCat("no sandbox ", id));
  if (e->paused) return absl::FailedPreconditionError(absl::StrCat("sandbox ", id, " is paused"));
  if (e->sandbox == nullptr) return absl::FailedPreconditionError(absl::StrCat("sandbox ", id, " is broken"));
  if (observer != nullptr && observer->on_start) observer->on_start();
  if (e->replayer) {
    std::optional<trajectory::Record> rec = e->replayer->Next(p.request);
    if (rec) {
      metrics_.replayed_execs++;
      metrics_.execs_total[e->tier]++;
      e->execs++;
      json j = ExecResultJson(FromRecord(*rec));
      j["seq"] = rec->seq;
      j["replayed"] = true;
      return j;
    }
    return GoLive(*e, p.request, p.spec);
  }
  return RunLive(*e, p.request, p.spec);
}

absl::StatusOr<json> Service::GoLive(Entry& e, const trajectory::ExecRequest& req, const ExecSpec& spec) {
  const trajectory::Divergence div = *e.replayer->divergence();
  const trajectory::RestorePlan plan = e.replayer->Plan();
  e.replayer.reset();
  DSEC_LOG(info, "daemon: sandbox={} task={} live at seq {} ({})", e.id, e.task_id.value_or(""), div.seq,
           div.reason);
  if (plan.checkpoint_layer) {
    // The files after the matched prefix: a fresh sandbox with the latest
    // checkpoint layer on top (made before the old one goes: a failure
    // leaves the sandbox as it was).
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<TierSandbox> fresh,
                          MakeTierSandbox(e, {*plan.checkpoint_layer}, absl::StrCat(e.id, "-r")));
    if (absl::Status s = e.sandbox->Destroy(); !s.ok()) {
      DSEC_LOG(warn, "daemon: sandbox={} replacing: {}", e.id, s.ToString());
    }
    e.sandbox = std::move(fresh);
    e.layers.push_back(*plan.checkpoint_layer);
  }
  for (const trajectory::Record& r : plan.rerun) {
    if (e.tier != "container") break;  // fncall calls leave no files behind
    ExecSpec again;
    again.argv = r.request.argv;
    again.cwd = r.request.cwd;
    again.timeout_ms = spec.timeout_ms;
    again.output_cap_bytes = options_.output_cap_bytes;
    auto out = e.sandbox->Exec(again);
    if (!out.ok() || out->exit_code != r.result.exit_code) {
      DSEC_LOG(warn, "daemon: sandbox={} re-running idempotent seq {} gave a different status", e.id, r.seq);
    }
  }
  auto* log_or = trajectories_ ? trajectories_->Get(*e.task_id).value_or(nullptr) : nullptr;
  if (log_or != nullptr && plan.prefix < log_or->next_seq()) {
    DSEC_RETURN_IF_ERROR(log_or->AppendBranch(plan.prefix));
  }
  DSEC_ASSIGN_OR_RETURN(json j, RunLive(e, req, spec));
  j["divergence"] = {{"seq", div.seq},
                     {"reason", div.reason},
                     {"fields", div.fields},
                     {"not_reapplied", plan.not_reapplied}};
  return j;
}

absl::StatusOr<json> Service::RunLive(Entry& e, const trajectory::ExecRequest& req, const ExecSpec& spec) {
  const int64_t start_ns = NowMs() * 1000000;
  DSEC_ASSIGN_OR_RETURN(ExecOutcome out, e.sandbox->Exec(spec));
  metrics_.exec_ms.at(e.tier).Observe(out.duration_ms);
  metrics_.execs_total[e.tier]++;
  metrics_.dropped_output_bytes += out.stdout_dropped + out.stderr_dropped;
  e.execs++;
  json j = ExecResultJson(out);
  if (e.task_id && trajectories_) {
    trajectory::ExecResult r;
    r.stdout_data = out.stdout_data;
    r.stderr_data = out.stderr_data;
    r.stdout_dropped = out.stdout_dropped;
    r.stderr_dropped = out.stderr_dropped;
    r.exit_code = out.exit_code.value_or(-1);
    r.signal = out.signal.value_or(0);
    r.timed_out = out.timed_out;
    r.start_unix_ns = start_ns;
    r.duration_ns = static_cast<int64_t>(out.duration_ms * 1e6);
    auto log = trajectories_->Get(*e.task_id);
    absl::StatusOr<trajectory::Record> rec = log.ok() ? (*log)->AppendExec(req, r)
                                                      : absl::StatusOr<trajectory::Record>(log.status());
    if (rec.ok()) {
      j["seq"] = rec->seq;  // durable: fdatasync'd before we answer
    } else {
      metrics_.unrecorded_execs++;
      DSEC_LOG(warn, "daemon: sandbox={} task={} exec not recorded: {}", e.id, *e.task_id,
               rec.status().ToString());
    }
  }
  return j;
}

absl::StatusOr<json> Service::PackDiff(const std::string& id, const json& body) {
  if (!body.is_object()) return absl::InvalidArgumentError("the request body must be a JSON object");
  std::string name, version;
  for (const char* f : {"name", "version"}) {
    auto it = body.find(f);
    if (it == body.end() || !it->is_string() || !layers::IsValidNameComponent(it->get<std::string>())) {
      return InvalidField(f, absl::StrCat(f, " is required: letters, digits, . _ - (no ':' or '/')"));
    }
    (std::string(f) == "name" ? name : version) = it->get<std::string>();
  }
  if (options_.layer_store.empty()) return absl::UnavailableError("this daemon has no layer store");
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, Find(id));
  DSEC_ASSIGN_OR_RETURN(layers::LayerStore store, layers::LayerStore::Create(options_.layer_store));
  std::lock_guard<std::mutex> lock(e->mu);
  if (e->destroyed) return absl::NotFoundError(absl::StrCat("no sandbox ", id));
  if (e->replayer && !e->replayer->live()) {
    // A resumed client re-sends its pack_diffs too: answer with the
    // checkpoint recorded at this point, if any.
    trajectory::RestorePlan plan = e->replayer->Plan();
    (void)plan;
    DSEC_ASSIGN_OR_RETURN(trajectory::TrajectoryLog * log, trajectories_->Get(*e->task_id));
    for (const trajectory::Record& c : log->Checkpoints()) {
      if (c.seq != e->replayer->replayed()) continue;
      DSEC_ASSIGN_OR_RETURN(layers::LayerInfo info, store.Inspect(c.layer));
      return json{{"layer", c.layer}, {"digest", info.metadata.digest}, {"size_bytes", info.metadata.size},
                  {"replayed", true}};
    }
    return absl::FailedPreconditionError(
        "the sandbox is replaying its task: pack_diff goes live only after an exec does");
  }
  DSEC_ASSIGN_OR_RETURN(std::string upper, e->sandbox->UpperDir());
  std::vector<std::string> parents;
  const std::string prefix = absl::StrCat(store.root(), "/layers/");
  for (const std::string& img : e->images) {
    if (img.rfind(prefix, 0) == 0 && img.size() > prefix.size() + 6 &&
        img.compare(img.size() - 6, 6, ".erofs") == 0) {
      parents.push_back(absl::StrCat("sha256:", img.substr(prefix.size(), img.size() - prefix.size() - 6)));
    }
  }
  // Frozen while the upper directory is copied.
  const bool was_paused = e->paused;
  if (!was_paused) DSEC_RETURN_IF_ERROR(e->sandbox->Pause());
  layers::BuildRequest req;
  req.name = name;
  req.version = version;
  req.parents = parents;
  req.source = absl::StrCat("pack_diff:", e->id);
  layers::PackDiffOptions pack_options;
  pack_options.upper_xattr_prefix = e->sandbox->UpperXattrPrefix();
  auto built = layers::PackDiff(store, upper, req, pack_options);
  if (!was_paused) {
    if (absl::Status s = e->sandbox->Resume(); !s.ok()) DSEC_LOG(warn, "daemon: resume after pack_diff: {}", s.ToString());
  }
  if (!built.ok()) return built.status();
  const std::string tag = absl::StrCat(name, ":", version);
  if (e->task_id && trajectories_) {
    DSEC_ASSIGN_OR_RETURN(trajectory::TrajectoryLog * log, trajectories_->Get(*e->task_id));
    DSEC_RETURN_IF_ERROR(log->AppendCheckpoint(log->next_seq(), tag));
  }
  return json{{"layer", tag}, {"digest", built->layer.digest}, {"size_bytes", built->layer.size}};
}

namespace {
json LayerJson(const layers::LayerMetadata& m) {
  return json{{"name", m.name},       {"version", m.version},  {"digest", m.digest},
              {"parents", m.parents}, {"size_bytes", m.size}, {"created", m.created}};
}
}  // namespace

absl::StatusOr<json> Service::ListLayers() const {
  if (options_.layer_store.empty()) return absl::UnavailableError("this daemon has no layer store");
  DSEC_ASSIGN_OR_RETURN(layers::LayerStore store, layers::LayerStore::Create(options_.layer_store));
  DSEC_ASSIGN_OR_RETURN(std::vector<layers::LayerInfo> all, store.List());
  json list = json::array();
  for (const layers::LayerInfo& l : all) list.push_back(LayerJson(l.metadata));
  return json{{"layers", list}};
}

absl::StatusOr<json> Service::AddLayer(const json& body) {
  if (!body.is_object()) return absl::InvalidArgumentError("the request body must be a JSON object");
  if (options_.layer_store.empty()) return absl::UnavailableError("this daemon has no layer store");
  layers::BuildRequest req;
  for (const char* f : {"name", "version"}) {
    auto it = body.find(f);
    if (it == body.end() || !it->is_string() || !layers::IsValidNameComponent(it->get<std::string>())) {
      return InvalidField(f, absl::StrCat(f, " is required: letters, digits, . _ -"));
    }
    (std::string(f) == "name" ? req.name : req.version) = it->get<std::string>();
  }
  auto path = body.find("path");
  if (path == body.end() || !path->is_string() || path->get<std::string>().empty() ||
      path->get<std::string>()[0] != '/') {
    return InvalidField("path", "path must be an absolute directory on the host");
  }
  if (auto it = body.find("parent"); it != body.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>().empty()) return InvalidField("parent", "parent must be a layer reference");
    req.parents.push_back(it->get<std::string>());
  }
  DSEC_ASSIGN_OR_RETURN(layers::LayerStore store, layers::LayerStore::Create(options_.layer_store));
  auto built = store.Build(path->get<std::string>(), req);
  if (!built.ok()) {
    if (absl::IsNotFound(built.status())) {
      return absl::Status(built.status().code(), built.status().message());
    }
    return built.status();
  }
  return LayerJson(built->layer);
}

absl::Status Service::RemoveLayer(const std::string& ref) {
  if (options_.layer_store.empty()) return absl::UnavailableError("this daemon has no layer store");
  DSEC_ASSIGN_OR_RETURN(layers::LayerStore store, layers::LayerStore::Create(options_.layer_store));
  DSEC_ASSIGN_OR_RETURN(std::string digest, store.Resolve(ref));
  const std::string image = store.ImagePath(digest);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, e] : sandboxes_) {
      for (const std::string& img : e->images) {
        if (img == image) return absl::FailedPreconditionError(absl::StrCat("layer ", ref, " is in use by ", id));
      }
    }
  }
  DSEC_RETURN_IF_ERROR(store.Remove(ref));
  // A cached shared mount of the image (sandbox/container/layer_mounts.h)
  // holds the deleted file open: drop it so that its blocks are freed.
  container::LayerMountCache::Default().Forget(image);
  return absl::OkStatus();
}

absl::StatusOr<json> Service::ResumeTask(const std::string& task_id, const json& body) {
  if (!ValidTaskIdLocal(task_id)) return InvalidField("task_id", "invalid task id");
  if (!trajectories_) return absl::UnavailableError("this daemon has no trajectory store");
  std::vector<std::string> tasks = trajectories_->Tasks();
  if (std::find(tasks.begin(), tasks.end(), task_id) == tasks.end()) {
    return absl::NotFoundError(absl::StrCat("no trajectory for task ", task_id));
  }
  DSEC_ASSIGN_OR_RETURN(trajectory::TrajectoryLog * log, trajectories_->Get(task_id));
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, CreateEntry(body, task_id));
  std::vector<trajectory::Record> execs = log->Execs();
  const size_t recorded = execs.size();
  {
    std::lock_guard<std::mutex> lock(e->mu);
    e->replayer = std::make_unique<trajectory::Replayer>(std::move(execs), log->Checkpoints());
  }
  json j = Describe(*e);
  j["recorded"] = recorded;
  return j;
}

absl::StatusOr<json> Service::TaskLog(const std::string& task_id) const {
  if (!ValidTaskIdLocal(task_id)) return InvalidField("task_id", "invalid task id");
  if (!trajectories_) return absl::UnavailableError("this daemon has no trajectory store");
  std::vector<std::string> tasks = trajectories_->Tasks();
  if (std::find(tasks.begin(), tasks.end(), task_id) == tasks.end()) {
    return absl::NotFoundError(absl::StrCat("no trajectory for task ", task_id));
  }
  DSEC_ASSIGN_OR_RETURN(trajectory::TrajectoryLog * log, trajectories_->Get(task_id));
  json records = json::array();
  for (const trajectory::Record& r : log->Execs()) {
    records.push_back({{"seq", r.seq},
                       {"argv", r.request.argv},
                       {"cwd", r.request.cwd},
                       {"exit_code", r.result.signal != 0 ? json(nullptr) : json(r.result.exit_code)},
                       {"signal", r.result.signal != 0 ? json(r.result.signal) : json(nullptr)},
                       {"duration_ms", static_cast<double>(r.result.duration_ns) / 1e6},
                       {"stdout_b64", Base64Encode(r.result.stdout_data)},
                       {"stderr_b64", Base64Encode(r.result.stderr_data)}});
  }
  json checkpoints = json::array();
  for (const trajectory::Record& c : log->Checkpoints()) {
    checkpoints.push_back({{"prefix", c.seq}, {"layer", c.layer}});
  }
  return json{{"records", records}, {"checkpoints", checkpoints}};
}

absl::Status Service::DeleteTask(const std::string& task_id) {
  if (!ValidTaskIdLocal(task_id)) return InvalidField("task_id", "invalid task id");
  if (!trajectories_) return absl::UnavailableError("this daemon has no trajectory store");
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = task_owner_.find(task_id);
    if (it != task_owner_.end()) {
      return absl::FailedPreconditionError(absl::StrCat("task ", task_id, " has a live sandbox (", it->second, ")"));
    }
  }
  std::vector<std::string> tasks = trajectories_->Tasks();
  if (std::find(tasks.begin(), tasks.end(), task_id) == tasks.end()) {
    return absl::NotFoundError(absl::StrCat("no trajectory for task ", task_id));
  }
  return trajectories_->Remove(task_id);
}

}  // namespace dsec::daemon
