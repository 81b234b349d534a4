// SPDX-License-Identifier: Apache-2.0
// Service: exec (live and replayed), the trajectory log, pack_diff and the
// layer store.
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "sandbox/daemon/errors.h"
#include "sandbox/daemon/service.h"
#include "sandbox/daemon/requests.h"
#include "sandbox/daemon/service_internal.h"
#include "sandbox/layers/layer_metadata.h"
#include "sandbox/layers/layer_store.h"
#include "sandbox/layers/pack_diff.h"
#include "base/clock.h"
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

json ExecResultJson(const tier::ExecOutcome& out) {
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
  tier::ExecSpec spec;
  trajectory::ExecRequest request;
};

absl::StatusOr<ParsedExec> ParseExec(const json& body, const tier::TierTraits& traits,
                                     const tier::TierOptions& tier_options, const ServiceOptions& options) {
  DSEC_ASSIGN_OR_RETURN(ExecRequestBody b, ParseExecRequest(body, RequestLimits{options.max_ttl_s,
                                                                                options.max_timeout_s}));
  ParsedExec p;
  p.spec.argv = std::move(b.argv);
  const bool script = traits.exec_form == tier::TierTraits::ExecForm::kCode;
  if (b.code) {
    if (!script) return InvalidField("code", absl::StrCat("the ", traits.name, " tier runs argv, not code"));
    p.spec.code = std::move(*b.code);
  } else if (script) {
    return InvalidField("code", absl::StrCat("code is required for the ", traits.name, " tier"));
  }
  if (!script && p.spec.argv.empty()) {
    return InvalidField("argv", "argv is required (a non-empty list of strings)");
  }
  p.spec.stdin_data = std::move(b.stdin_data);
  p.spec.env = std::move(b.env);
  p.spec.cwd = std::move(b.cwd);
  p.spec.timeout_ms = b.timeout_s.value_or(options.default_timeout_s) * 1000;
  p.request.idempotent = b.idempotent;
  p.spec.output_cap_bytes = options.output_cap_bytes;
  // What identifies the command in the trajectory: as the tier says, else
  // its argv.
  p.request.argv = traits.recorded_command ? traits.recorded_command(tier_options, p.spec) : p.spec.argv;
  p.request.cwd = p.spec.cwd.empty() ? traits.default_cwd : p.spec.cwd;
  std::vector<std::string> env;
  for (const auto& [k, v] : p.spec.env) env.push_back(absl::StrCat(k, "=", v));
  p.request.env_digest = trajectory::DigestEnv(env);
  p.request.stdin_digest = trajectory::DigestBytes(p.spec.stdin_data);
  return p;
}

tier::ExecOutcome FromRecord(const trajectory::Record& r) {
  tier::ExecOutcome o;
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
  const tier::TierTraits& traits = registry_.traits(e->tier);
  DSEC_ASSIGN_OR_RETURN(ParsedExec p, ParseExec(body, traits, e->options, options_));
  if (observer != nullptr) p.spec.on_output = observer->on_output;
  if (observer != nullptr && observer->control != nullptr) {
    if (!traits.exec_control) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the ", traits.name, " tier takes stdin only with the request and cannot signal one command"));
    }
    if (e->task_id) {
      return absl::FailedPreconditionError(
          "a task's sandbox takes stdin only with the request (its trajectory records it)");
    }
    p.spec.control = observer->control;
  }
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
  // A tier whose execs overlap shares the entry's lock among them; a
  // task's execs go one at a time (its trajectory is one sequence).
  std::shared_lock<std::shared_mutex> shared(e->mu, std::defer_lock);
  std::unique_lock<std::shared_mutex> exclusive(e->mu, std::defer_lock);
  if (traits.concurrent_execs && !e->task_id) {
    shared.lock();
  } else {
    exclusive.lock();
  }
  if (e->destroyed || e->deleting) return absl::NotFoundError(absl::StrCat("no sandbox ", id));
  if (e->paused) return absl::FailedPreconditionError(absl::StrCat("sandbox ", id, " is paused"));
  if (e->sandbox == nullptr) return absl::FailedPreconditionError(absl::StrCat("sandbox ", id, " is broken"));
  if (std::optional<std::string> ended = e->Ended()) {
    return absl::FailedPreconditionError(absl::StrCat("sandbox ", id, " has ended: ", *ended));
  }
  e->ExecBegins();
  struct ExecEnd {
    Entry* e;
    bool spawned = false;
    ~ExecEnd() { e->ExecEnds(spawned); }
  } exec_end{e.get()};
  Entry* entry = e.get();
  bool* spawned = &exec_end.spawned;
  p.spec.on_spawned = [entry, spawned] {
    *spawned = true;
    entry->ExecSpawned();
  };
  if (observer != nullptr && observer->on_start) observer->on_start();
  if (e->replayer) {
    std::optional<trajectory::Record> rec = e->replayer->Next(p.request);
    if (rec) {
      metrics_.replayed_execs++;
      metrics_.execs_total[registry_.name(e->tier)]++;
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

absl::StatusOr<json> Service::GoLive(Entry& e, const trajectory::ExecRequest& req,
                                     const tier::ExecSpec& spec) {
  const trajectory::Divergence div = *e.replayer->divergence();
  const trajectory::RestorePlan plan = e.replayer->Plan();
  e.replayer.reset();
  DSEC_LOG(info, "daemon: sandbox={} task={} live at seq {} ({})", e.id, e.task_id.value_or(""), div.seq,
           div.reason);
  if (plan.checkpoint_layer) {
    // The files after the matched prefix: a fresh sandbox with the latest
    // checkpoint layer on top (made before the old one goes: a failure
    // leaves the sandbox as it was).
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<tier::TierSandbox> fresh,
                          MakeTierSandbox(e, {*plan.checkpoint_layer}, absl::StrCat(e.id, "-r")));
    {
      std::lock_guard<std::mutex> kill_lock(e.kill_mu);
      if (absl::Status s = e.sandbox->Destroy(); !s.ok()) {
        DSEC_LOG(warn, "daemon: sandbox={} replacing: {}", e.id, s.ToString());
      }
    }
    e.ReplaceSandbox(std::move(fresh));
    e.SetNet(e.sandbox->network());  // a network of its own (a new lease)
    e.layers.push_back(*plan.checkpoint_layer);
  }
  for (const trajectory::Record& r : plan.rerun) {
    if (!registry_.traits(e.tier).persistent_files) break;  // such calls leave no files behind
    tier::ExecSpec again;
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

absl::StatusOr<json> Service::RunLive(Entry& e, const trajectory::ExecRequest& req,
                                      const tier::ExecSpec& spec) {
  const int64_t start_ns = NowMs() * 1'000'000;
  absl::StatusOr<tier::ExecOutcome> outcome = e.sandbox->Exec(spec);
  if (!outcome.ok()) return HostFailure("exec", e.id, outcome.status());
  tier::ExecOutcome& out = *outcome;
  const std::string& tier_name = registry_.name(e.tier);
  metrics_.exec_ms.at(tier_name).Observe(out.duration_ms);
  metrics_.execs_total[tier_name]++;
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
  DSEC_ASSIGN_OR_RETURN(PackDiffRequest pack, ParsePackDiffRequest(body));
  const std::string& name = pack.name;
  const std::string& version = pack.version;
  if (options_.layer_store.empty()) return absl::UnavailableError("this daemon has no layer store");
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e, Find(id));
  DSEC_ASSIGN_OR_RETURN(layers::LayerStore store, layers::LayerStore::Create(options_.layer_store));
  OpsGuard lock = OpsLock(*e);
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
  DSEC_ASSIGN_OR_RETURN(layers::BuildResult built, PackLocked(*e, store, name, version));
  const std::string tag = absl::StrCat(name, ":", version);
  if (e->task_id && trajectories_) {
    DSEC_ASSIGN_OR_RETURN(trajectory::TrajectoryLog * log, trajectories_->Get(*e->task_id));
    DSEC_RETURN_IF_ERROR(log->AppendCheckpoint(log->next_seq(), tag));
  }
  return json{{"layer", tag}, {"digest", built.layer.digest}, {"size_bytes", built.layer.size}};
}

absl::StatusOr<layers::BuildResult> Service::PackLocked(Entry& e, layers::LayerStore& store,
                                                        const std::string& name,
                                                        const std::string& version, double* pause_ms) {
  DSEC_ASSIGN_OR_RETURN(std::string upper, e.sandbox->UpperDir());
  std::vector<std::string> parents;
  for (const std::string& img : e.images) {
    if (std::string digest = store.DigestOfImage(img); !digest.empty()) parents.push_back(digest);
  }
  // Frozen while the upper directory is packed, and no files call of the
  // API writes into it meanwhile (they may run beside an exec: kill_mu).
  // (Thawed once the copy was made, before mkfs.erofs, the source stood
  // still a third as long but the fork took ~5 ms more here, cause not
  // found: docs/benchmarks.md, "Fork".)
  std::lock_guard<std::mutex> files_lock(e.kill_mu);
  if (pause_ms != nullptr) *pause_ms = 0;
  const int64_t frozen_ns = MonotonicNowNs();  // the freeze included
  const bool was_paused = e.paused;
  if (!was_paused) DSEC_RETURN_IF_ERROR(e.sandbox->Pause());
  layers::BuildRequest req;
  req.name = name;
  req.version = version;
  req.parents = parents;
  req.source = absl::StrCat("pack_diff:", e.id);
  layers::PackDiffOptions pack_options;
  pack_options.upper_xattr_prefix = e.sandbox->UpperXattrPrefix();
  pack_options.max_layer_bytes = options_.max_layer_bytes;
  pack_options.reserve_free_bytes = options_.layer_store_reserve_bytes;
  auto built = layers::PackDiff(store, upper, req, pack_options);
  if (!was_paused) {
    if (absl::Status s = e.sandbox->Resume(); !s.ok()) DSEC_LOG(warn, "daemon: resume after pack_diff: {}", s.ToString());
    if (pause_ms != nullptr) *pause_ms = static_cast<double>(MonotonicNowNs() - frozen_ns) / 1e6;
  }
  if (!built.ok()) {
    // Limits and refusals say what the client can change; anything else
    // names host paths (the upper, the store), which stay in the log.
    const absl::StatusCode code = built.status().code();
    if (code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kResourceExhausted ||
        code == absl::StatusCode::kNotFound) {
      return built.status();
    }
    DSEC_LOG(warn, "daemon: pack_diff of {}: {}", e.id, built.status().ToString());
    return absl::Status(code, "pack_diff failed (the daemon's log says why)");
  }
  return *std::move(built);
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
  DSEC_ASSIGN_OR_RETURN(AddLayerRequest add, ParseAddLayerRequest(body));
  if (options_.layer_store.empty()) return absl::UnavailableError("this daemon has no layer store");
  layers::BuildRequest req;
  req.name = add.name;
  req.version = add.version;
  if (add.parent) req.parents.push_back(*add.parent);
  DSEC_ASSIGN_OR_RETURN(layers::LayerStore store, layers::LayerStore::Create(options_.layer_store));
  auto built = store.Build(add.path, req);
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
  // A tier's cached mount of the image holds the deleted file open: each
  // drops what it keeps, so that its blocks are freed.
  for (tier::TierId t : registry_.ids()) registry_.tier(t).LayerRemoved(image);
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
    std::lock_guard<std::shared_mutex> lock(e->mu);
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
