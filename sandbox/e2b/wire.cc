// SPDX-License-Identifier: Apache-2.0
#include "sandbox/e2b/wire.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/json_fields.h"
#include "base/status.h"

namespace dsec::e2b {

using nlohmann::json;

namespace {

// protobuf JSON accepts a field by its JSON name or its proto name.
const json* Field(const json& obj, const char* json_name, const char* proto_name = nullptr) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(json_name);
  if (it != obj.end() && !it->is_null()) return &*it;
  if (proto_name != nullptr) {
    it = obj.find(proto_name);
    if (it != obj.end() && !it->is_null()) return &*it;
  }
  return nullptr;
}

absl::Status NotObject(const std::string& field) { return InvalidField(field, field + " must be an object"); }

absl::StatusOr<std::map<std::string, std::string>> StringMap(const json* j, const std::string& field) {
  std::map<std::string, std::string> out;
  if (j == nullptr) return out;
  if (!j->is_object()) return NotObject(field);
  for (const auto& [k, v] : j->items()) {
    if (!v.is_string()) return InvalidField(absl::StrCat(field, ".", k), "must be a string");
    out[k] = v.get<std::string>();
  }
  return out;
}

// A JSON number or (protobuf JSON's form of 64-bit integers) a decimal
// string, as a non-negative integer no larger than `max`.
absl::StatusOr<int64_t> NonNegative(const json& j, const std::string& field, int64_t max) {
  int64_t v = 0;
  if (j.is_number_integer() || j.is_number_unsigned()) {
    if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return InvalidField(field, "out of range");
    }
    v = j.get<int64_t>();
  } else if (j.is_number_float()) {
    const double d = j.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || d < 0 || d > static_cast<double>(max)) {
      return InvalidField(field, absl::StrCat("must be an integer in [0, ", max, "]"));
    }
    v = static_cast<int64_t>(d);
  } else if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (s.empty() || s.size() > 18) return InvalidField(field, "must be a decimal integer");
    for (char c : s) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return InvalidField(field, "must be a decimal integer");
      v = v * 10 + (c - '0');
    }
  } else {
    return InvalidField(field, "must be an integer");
  }
  if (v < 0 || v > max) return InvalidField(field, absl::StrCat("must be in [0, ", max, "]"));
  return v;
}

absl::Status Unsupported(const std::string& field, absl::string_view why) {
  return absl::UnimplementedError(absl::StrCat(field, ": ", why, " (not supported by dsec-vmm's E2B API)"));
}

}  // namespace

absl::Status ValidateTemplateName(absl::string_view name) {
  if (name.empty() || name.size() > 128) return InvalidField("templateID", "must be 1..128 characters");
  for (char c : name) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' || c == '-')) {
      return InvalidField("templateID", "may hold only letters, digits and _ . : -");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Template> ParseTemplateFlag(absl::string_view flag) {
  const size_t eq = flag.find('=');
  if (eq == absl::string_view::npos) return absl::InvalidArgumentError("template: want NAME=REF[,REF...]");
  Template t;
  t.name = std::string(flag.substr(0, eq));
  if (absl::Status s = ValidateTemplateName(t.name); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("template name ", t.name, ": ", s.message()));
  }
  for (absl::string_view ref : absl::StrSplit(flag.substr(eq + 1), ',', absl::SkipEmpty())) {
    t.layers.emplace_back(ref);
  }
  if (t.layers.empty()) return absl::InvalidArgumentError(absl::StrCat("template ", t.name, ": no layers"));
  return t;
}

absl::StatusOr<std::map<std::string, Template>> ParseTemplateFile(const json& doc) {
  std::map<std::string, Template> out;
  const json* all = Field(doc, "templates");
  if (!doc.is_object() || all == nullptr || !all->is_object()) {
    return InvalidField("templates", "want {\"templates\": {NAME: {\"layers\": [...]}}}");
  }
  for (const auto& [name, spec] : all->items()) {
    const std::string f = absl::StrCat("templates.", name);
    if (absl::Status s = ValidateTemplateName(name); !s.ok()) return InvalidField(f, std::string(s.message()));
    if (!spec.is_object()) return NotObject(f);
    Template t;
    t.name = name;
    if (const json* tier = Field(spec, "tier")) {
      if (!tier->is_string() || tier->get_ref<const std::string&>().empty()) {
        return InvalidField(f + ".tier", "must be a tier name");
      }
      t.tier = tier->get<std::string>();
    }
    if (const json* layers = Field(spec, "layers")) {
      if (!layers->is_array()) return InvalidField(f + ".layers", "must be an array of layer references");
      for (size_t i = 0; i < layers->size(); ++i) {
        if (!(*layers)[i].is_string()) return InvalidField(absl::StrCat(f, ".layers[", i, "]"), "must be a string");
        t.layers.push_back((*layers)[i].get<std::string>());
      }
    }
    if (const json* cpus = Field(spec, "cpus")) {
      if (!cpus->is_number() || cpus->get<double>() <= 0 || cpus->get<double>() > 1024) {
        return InvalidField(f + ".cpus", "must be a number in (0, 1024]");
      }
      t.cpus = cpus->get<double>();
    }
    if (const json* qos = Field(spec, "qos")) {
      if (!qos->is_string() || (*qos != "ls" && *qos != "be")) return InvalidField(f + ".qos", "must be ls or be");
      t.qos = qos->get<std::string>();
    }
    if (const json* mem = Field(spec, "memory_mib")) {
      DSEC_ASSIGN_OR_RETURN(int64_t m, NonNegative(*mem, f + ".memory_mib", int64_t{1} << 30));
      t.memory_mib = static_cast<uint64_t>(m);
    }
    out[name] = std::move(t);
  }
  return out;
}

json TemplateFileJson(const std::map<std::string, Template>& templates) {
  json all = json::object();
  for (const auto& [name, t] : templates) {
    json spec = {{"tier", t.tier}, {"layers", t.layers}};
    if (t.cpus) spec["cpus"] = *t.cpus;
    if (t.memory_mib) spec["memory_mib"] = *t.memory_mib;
    if (t.qos) spec["qos"] = *t.qos;
    all[name] = spec;
  }
  return json{{"templates", all}};
}

absl::StatusOr<CreateRequest> ParseCreateRequest(const json& body, int64_t max_timeout_s) {
  if (!body.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  CreateRequest r;
  const json* tmpl = Field(body, "templateID");
  if (tmpl == nullptr || !tmpl->is_string()) return InvalidField("templateID", "templateID is required");
  r.template_id = tmpl->get<std::string>();
  DSEC_RETURN_IF_ERROR(ValidateTemplateName(r.template_id));
  if (const json* t = Field(body, "timeout")) {
    DSEC_ASSIGN_OR_RETURN(r.timeout_s, NonNegative(*t, "timeout", max_timeout_s));
  }
  if (const json* m = Field(body, "metadata")) {
    if (!m->is_object()) return NotObject("metadata");
    for (const auto& [k, v] : m->items()) {
      if (!v.is_string()) return InvalidField(absl::StrCat("metadata.", k), "must be a string");
    }
    r.metadata = *m;
    if (auto task = m->find(kTaskMetadataKey); task != m->end()) r.task_id = task->get<std::string>();
  }
  DSEC_ASSIGN_OR_RETURN(r.env_vars, StringMap(Field(body, "envVars"), "envVars"));
  // Fields E2B has that this node does not: refused by name, never
  // silently dropped (a client relying on them must know).
  if (const json* a = Field(body, "autoPause"); a != nullptr && (!a->is_boolean() || a->get<bool>())) {
    return Unsupported("autoPause", "pausing instead of killing at the timeout");
  }
  if (const json* a = Field(body, "autoResume"); a != nullptr) {
    const json* enabled = Field(*a, "enabled");
    if (!(enabled != nullptr && enabled->is_boolean() && !enabled->get<bool>())) {
      return Unsupported("autoResume", "resuming a paused sandbox on traffic");
    }
  }
  if (const json* a = Field(body, "allow_internet_access"); a != nullptr && (!a->is_boolean() || a->get<bool>())) {
    return Unsupported("allow_internet_access", "sandboxes made through the E2B API have no network");
  }
  for (const char* f : {"network", "mcp", "volumeMounts", "iam", "autoPauseMemory", "secrets"}) {
    const json* v = Field(body, f);
    if (v != nullptr && !(v->is_array() && v->empty()) && !(v->is_object() && v->empty())) {
      return Unsupported(f, "this option");
    }
  }
  return r;
}

json NodeCreateBody(const Template& t, int64_t ttl_s, const std::optional<std::string>& task_id) {
  json b = {{"tier", t.tier}, {"ttl_s", ttl_s}};
  if (t.qos) b["qos"] = *t.qos;
  if (task_id) b["task_id"] = *task_id;
  if (!t.layers.empty()) b["layers"] = t.layers;
  if (t.cpus) b["cpus"] = *t.cpus;
  if (t.memory_mib) b["memory_mib"] = *t.memory_mib;
  return b;
}

absl::StatusOr<std::optional<int64_t>> ParseSecondsField(const json& body, const char* field, int64_t max_s) {
  if (!body.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  const json* v = Field(body, field);
  if (v == nullptr) return std::optional<int64_t>();
  DSEC_ASSIGN_OR_RETURN(int64_t s, NonNegative(*v, field, max_s));
  return std::optional<int64_t>(s);
}

absl::StatusOr<StartRequest> ParseStartRequest(const json& body) {
  if (!body.is_object()) return absl::InvalidArgumentError("StartRequest must be a JSON object");
  const json* p = Field(body, "process");
  if (p == nullptr || !p->is_object()) return InvalidField("process", "process is required");
  StartRequest r;
  const json* cmd = Field(*p, "cmd");
  if (cmd == nullptr || !cmd->is_string() || cmd->get_ref<const std::string&>().empty()) {
    return InvalidField("process.cmd", "must be a non-empty string");
  }
  r.cmd = cmd->get<std::string>();
  if (const json* args = Field(*p, "args")) {
    if (!args->is_array()) return InvalidField("process.args", "must be an array of strings");
    for (size_t i = 0; i < args->size(); ++i) {
      if (!(*args)[i].is_string()) return InvalidField(absl::StrCat("process.args[", i, "]"), "must be a string");
      r.args.push_back((*args)[i].get<std::string>());
    }
  }
  DSEC_ASSIGN_OR_RETURN(r.envs, StringMap(Field(*p, "envs"), "process.envs"));
  if (const json* cwd = Field(*p, "cwd")) {
    if (!cwd->is_string()) return InvalidField("process.cwd", "must be a string");
    if (!cwd->get_ref<const std::string&>().empty()) r.cwd = AbsolutePath(cwd->get<std::string>());
  }
  if (const json* tag = Field(body, "tag")) {
    if (!tag->is_string()) return InvalidField("tag", "must be a string");
    r.tag = tag->get<std::string>();
  }
  if (Field(body, "pty") != nullptr) return Unsupported("pty", "pseudo-terminals");
  if (const json* s = Field(body, "stdin"); s != nullptr && !s->is_null()) {
    if (!s->is_boolean()) return InvalidField("stdin", "must be a boolean");
    r.stdin = s->get<bool>();
  }
  return r;
}

absl::StatusOr<std::string> ParseStdinInput(const json& body) {
  const json* in = Field(body, "input");
  if (in == nullptr || !in->is_object()) return InvalidField("input", "input is required");
  if (Field(*in, "pty") != nullptr) return Unsupported("input.pty", "pseudo-terminals");
  const json* data = Field(*in, "stdin");
  if (data == nullptr) return InvalidField("input.stdin", "input.stdin is required (base64)");
  if (!data->is_string()) return InvalidField("input.stdin", "must be a base64 string");
  std::string bytes;
  if (!absl::Base64Unescape(data->get<std::string>(), &bytes)) {
    return InvalidField("input.stdin", "must be a base64 string");
  }
  return bytes;
}

json NodeExecBody(const StartRequest& req, const std::map<std::string, std::string>& defaults, int64_t timeout_ms,
                  int64_t max_timeout_s) {
  std::vector<std::string> argv = {req.cmd};
  argv.insert(argv.end(), req.args.begin(), req.args.end());
  std::map<std::string, std::string> env = defaults;
  for (const auto& [k, v] : req.envs) env[k] = v;
  json b = {{"argv", argv}, {"env", env}};
  if (!req.cwd.empty()) b["cwd"] = req.cwd;
  if (timeout_ms == 0) {
    b["timeout_s"] = max_timeout_s;
  } else if (timeout_ms > 0) {
    b["timeout_s"] = std::min<int64_t>(max_timeout_s, std::max<int64_t>(1, (timeout_ms + 999) / 1000));
  }
  return b;
}

absl::StatusOr<Selector> ParseSelector(const json& body) {
  const json* p = Field(body, "process");
  if (p == nullptr || !p->is_object()) return InvalidField("process", "a process selector is required");
  Selector s;
  if (const json* pid = Field(*p, "pid")) {
    DSEC_ASSIGN_OR_RETURN(int64_t v, NonNegative(*pid, "process.pid", UINT32_MAX));
    s.pid = static_cast<uint32_t>(v);
  } else if (const json* tag = Field(*p, "tag")) {
    if (!tag->is_string()) return InvalidField("process.tag", "must be a string");
    s.tag = tag->get<std::string>();
  } else {
    return InvalidField("process", "name a pid or a tag");
  }
  return s;
}

absl::StatusOr<int> ParseSignal(const json& body) {
  const json* s = Field(body, "signal");
  if (s == nullptr) return InvalidField("signal", "a signal is required");
  if (s->is_string()) {
    const std::string name = s->get<std::string>();
    if (name == "SIGNAL_SIGKILL") return 9;
    if (name == "SIGNAL_SIGTERM") return 15;
    return InvalidField("signal", "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM (9 or 15)");
  }
  if (s->is_number_integer()) {
    const int64_t v = s->get<int64_t>();
    if (v == 9 || v == 15) return static_cast<int>(v);
  }
  return InvalidField("signal", "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM (9 or 15)");
}

absl::StatusCode CodeOfName(absl::string_view name) {
  static const std::pair<const char*, absl::StatusCode> kCodes[] = {
      {"INVALID_ARGUMENT", absl::StatusCode::kInvalidArgument},
      {"NOT_FOUND", absl::StatusCode::kNotFound},
      {"ALREADY_EXISTS", absl::StatusCode::kAlreadyExists},
      {"FAILED_PRECONDITION", absl::StatusCode::kFailedPrecondition},
      {"RESOURCE_EXHAUSTED", absl::StatusCode::kResourceExhausted},
      {"PERMISSION_DENIED", absl::StatusCode::kPermissionDenied},
      {"UNAVAILABLE", absl::StatusCode::kUnavailable},
      {"UNAUTHENTICATED", absl::StatusCode::kUnauthenticated},
      {"DEADLINE_EXCEEDED", absl::StatusCode::kDeadlineExceeded},
      {"UNIMPLEMENTED", absl::StatusCode::kUnimplemented},
  };
  for (const auto& [n, c] : kCodes) {
    if (name == n) return c;
  }
  return absl::StatusCode::kInternal;
}

ProcessEnd ProcessEndOf(const json& last_line) {
  ProcessEnd out;
  if (const json* err = Field(last_line, "error")) {
    const json* code = Field(*err, "code");
    const json* msg = Field(*err, "message");
    out.status = absl::Status(code != nullptr && code->is_string() ? CodeOfName(code->get<std::string>())
                                                                    : absl::StatusCode::kInternal,
                              msg != nullptr && msg->is_string() ? msg->get<std::string>() : "exec failed");
    return out;
  }
  const json* r = Field(last_line, "exit");
  if (r == nullptr || !r->is_object()) {
    out.status = absl::InternalError("the exec ended without a result");
    return out;
  }
  const json* timed_out = Field(*r, "timed_out");
  if (timed_out != nullptr && timed_out->is_boolean() && timed_out->get<bool>()) {
    out.status = absl::DeadlineExceededError("the command ran past its timeout and was killed");
    return out;
  }
  const json* code = Field(*r, "exit_code");
  const json* sig = Field(*r, "signal");
  const json* killed_by = Field(*r, "killed_by");
  json end = json::object();
  if (code != nullptr && code->is_number_integer()) {
    end["exitCode"] = code->get<int>();
    end["exited"] = true;
    end["status"] = absl::StrCat("exit status ", code->get<int>());
  } else {
    end["exitCode"] = -1;
    end["exited"] = false;
    end["status"] = sig != nullptr && sig->is_number_integer() ? absl::StrCat("signal: ", sig->get<int>())
                                                                : std::string("signal: killed");
  }
  if (killed_by != nullptr && killed_by->is_string()) {
    end["error"] = absl::StrCat("killed by the sandbox's ", killed_by->get<std::string>(), " limit");
  }
  out.end_event = json{{"event", {{"end", end}}}};
  return out;
}

absl::StatusOr<json> DataEventOf(const json& line) {
  const json* stream = Field(line, "stream");
  const json* data = Field(line, "data_b64");
  if (stream == nullptr || data == nullptr || !stream->is_string() || !data->is_string()) {
    return absl::InternalError("not an output line");
  }
  const std::string& name = stream->get_ref<const std::string&>();
  if (name != "stdout" && name != "stderr") return absl::InternalError("unknown output stream");
  // Both are standard base64: protobuf JSON's form of bytes.
  return json{{"event", {{"data", {{name, *data}}}}}};
}

absl::StatusOr<std::string> ParsePathField(const json& body, const char* field) {
  if (!body.is_object()) return absl::InvalidArgumentError("the request must be a JSON object");
  const json* p = Field(body, field);
  if (p == nullptr || !p->is_string() || p->get_ref<const std::string&>().empty()) {
    return InvalidField(field, absl::StrCat(field, " must be a non-empty string"));
  }
  return AbsolutePath(p->get<std::string>());
}

std::string AbsolutePath(absl::string_view path) {
  std::string p = path.empty() || path[0] != '/' ? absl::StrCat("/", path) : std::string(path);
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string ParentOf(absl::string_view abs_path) {
  const size_t slash = abs_path.rfind('/');
  if (slash == absl::string_view::npos || slash == 0) return "/";
  return std::string(abs_path.substr(0, slash));
}

std::string BaseName(absl::string_view abs_path) {
  const size_t slash = abs_path.rfind('/');
  return std::string(slash == absl::string_view::npos ? abs_path : abs_path.substr(slash + 1));
}

absl::StatusOr<uint32_t> ParseDepth(const json& body, uint32_t max_depth) {
  const json* d = Field(body, "depth");
  if (d == nullptr) return 1u;
  DSEC_ASSIGN_OR_RETURN(int64_t v, NonNegative(*d, "depth", UINT32_MAX));
  if (v == 0) return 1u;  // proto3's default: unset
  if (v > max_depth) return InvalidField("depth", absl::StrCat("at most ", max_depth));
  return static_cast<uint32_t>(v);
}

absl::StatusOr<WatchRequest> ParseWatchRequest(const json& body) {
  WatchRequest w;
  DSEC_ASSIGN_OR_RETURN(w.path, ParsePathField(body, "path"));
  if (const json* r = Field(body, "recursive"); r != nullptr) {
    if (!r->is_boolean()) return InvalidField("recursive", "must be a boolean");
    w.recursive = r->get<bool>();
  }
  if (const json* e = Field(body, "includeEntry", "include_entry"); e != nullptr) {
    if (!e->is_boolean()) return InvalidField("includeEntry", "must be a boolean");
    if (e->get<bool>()) return Unsupported("includeEntry", "an entry with each watch event");
  }
  if (const json* m = Field(body, "allowNetworkMounts", "allow_network_mounts"); m != nullptr && !m->is_boolean()) {
    return InvalidField("allowNetworkMounts", "must be a boolean");
  }
  return w;
}

absl::StatusOr<std::string> ParseWatcherId(const json& body) {
  const json* w = Field(body, "watcherId", "watcher_id");
  if (w == nullptr || !w->is_string() || w->get_ref<const std::string&>().empty()) {
    return InvalidField("watcherId", "must be a non-empty string");
  }
  return w->get<std::string>();
}

std::string PermissionsString(uint32_t mode, absl::string_view type) {
  std::string s = type == "dir" ? "d" : type == "symlink" ? "l" : "-";
  const char* rwx = "rwx";
  for (int i = 8; i >= 0; --i) s.push_back((mode >> i) & 1 ? rwx[(8 - i) % 3] : '-');
  return s;
}

json EntryInfoJson(const std::string& path, const json& node_entry) {
  const json* t = Field(node_entry, "type");
  const json* sz = Field(node_entry, "size");
  const json* md = Field(node_entry, "mode");
  const json* nm = Field(node_entry, "name");
  const std::string type = t != nullptr && t->is_string() ? t->get<std::string>() : "other";
  auto non_negative = [](const json* j) { return j != nullptr && j->is_number_integer() && j->get<int64_t>() >= 0; };
  const uint64_t size = non_negative(sz) ? sz->get<uint64_t>() : 0;
  const uint32_t mode = non_negative(md) ? static_cast<uint32_t>(md->get<uint64_t>() & 0xffffffffu) : 0;
  const std::string name = nm != nullptr && nm->is_string() ? nm->get<std::string>() : BaseName(path);
  const char* file_type = type == "file" ? "FILE_TYPE_FILE"
                          : type == "dir" ? "FILE_TYPE_DIRECTORY"
                          : type == "symlink" ? "FILE_TYPE_SYMLINK"
                                              : "FILE_TYPE_UNSPECIFIED";
  return json{{"name", name},
              {"type", file_type},
              {"path", path},
              {"size", std::to_string(size)},  // int64: a string in protobuf JSON
              {"mode", mode & 07777},
              {"permissions", PermissionsString(mode, type)}};
}

json ApiErrorJson(int http_status, absl::string_view message) {
  return json{{"code", http_status}, {"message", std::string(message)}};
}

bool KeyMatches(absl::string_view presented, absl::string_view key) {
  if (key.empty()) return false;
  // Every byte of the key is compared whatever the presented length.
  unsigned char diff = presented.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char p = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    diff |= static_cast<unsigned char>(p ^ static_cast<unsigned char>(key[i]));
  }
  return diff == 0;
}

}  // namespace dsec::e2b
