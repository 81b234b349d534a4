// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/requests.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/json_fields.h"
#include "base/status.h"
#include "sandbox/layers/layer_metadata.h"
#include "sandbox/trajectory/log.h"
#include "sandbox/trajectory/record.h"

namespace dsec::daemon {

namespace {

using nlohmann::json;

constexpr size_t kMaxLayers = 64;
constexpr size_t kMaxLayerRef = 512;
constexpr size_t kMaxPath = 4096;
// A JSON body is at most 1 MiB (the HTTP layer's limit); strings inside it
// are bounded by that, the trajectory's own limits are tighter.
constexpr size_t kMaxStdinText = 1u << 20;
// execve(2) refuses a single argument or "NAME=value" of MAX_ARG_STRLEN
// (32 pages) bytes or more with its NUL (E2BIG); the environment as a whole
// gets a budget of its own so that argv and env stay well under the
// kernel's total (a quarter of the stack limit, at least 128 KiB more).
constexpr size_t kMaxArgStrlen = 32 * 4096;
constexpr size_t kMaxEnvBytes = 256 * 1024;
constexpr size_t kMaxEnvVars = 4096;

bool HasNul(const std::string& s) { return s.find('\0') != std::string::npos; }

// The create fields every tier takes; the others are the tier's own.
constexpr std::string_view kCommonCreateFields[] = {"tier",  "layers",  "cpus",   "memory_mib", "pids",
                                                    "qos",   "ttl_s",   "task_id", "network"};

absl::StatusOr<std::string> LayerNamePart(JsonFields& f, std::string_view key) {
  absl::StatusOr<std::optional<std::string>> v = f.OptString(key, 128);
  const std::string path = f.Path(key);
  if (!v.ok() || !v->has_value() || !layers::IsValidNameComponent(**v)) {
    return InvalidField(path, absl::StrCat(path, " is required: letters, digits, . _ - (no ':' or '/')"));
  }
  return **v;
}

}  // namespace

absl::StatusOr<CreateRequest> ParseCreateRequest(const json& body, const RequestLimits& limits) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(body));
  CreateRequest r;
  DSEC_ASSIGN_OR_RETURN(auto tier, f.OptString("tier", 64));
  if (!tier || tier->empty()) return InvalidField("tier", "tier is required");
  r.tier = *tier;
  DSEC_ASSIGN_OR_RETURN(auto layers, f.OptStringList("layers", kMaxLayers, kMaxLayerRef));
  if (layers) r.layers = std::move(*layers);
  DSEC_ASSIGN_OR_RETURN(r.cpus, f.OptNumber("cpus", 0, 1024));
  // The kernel refuses a CFS quota under 1 ms of each 100 ms period.
  if (r.cpus && *r.cpus < 0.01) return InvalidField("cpus", "cpus must be a number in [0.01, 1024]");
  DSEC_ASSIGN_OR_RETURN(r.memory_mib, f.OptUint("memory_mib", 16, uint64_t{1} << 20));
  DSEC_ASSIGN_OR_RETURN(r.pids, f.OptUint("pids", 8, uint64_t{1} << 20));
  DSEC_ASSIGN_OR_RETURN(r.qos, f.OptEnum("qos", {"ls", "be"}));
  DSEC_ASSIGN_OR_RETURN(r.ttl_s, f.OptInt("ttl_s", 1, limits.max_ttl_s));
  DSEC_ASSIGN_OR_RETURN(r.task_id, f.OptString("task_id", 256));
  if (r.task_id && !trajectory::ValidateTaskId(*r.task_id).ok()) {
    return InvalidField("task_id",
                        "task_id must be 1-128 characters of [A-Za-z0-9._-], not starting with '.'");
  }
  if (const json* net = f.Raw("network")) {
    DSEC_ASSIGN_OR_RETURN(r.network, network::ParseNetworkSpec(*net, "network"));
  }
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (std::find(std::begin(kCommonCreateFields), std::end(kCommonCreateFields), it.key()) ==
        std::end(kCommonCreateFields)) {
      r.tier_fields[it.key()] = *it;
    }
  }
  return r;
}

absl::StatusOr<network::NetworkSpec> ParseNetworkPatch(const json& body) {
  return network::ParseNetworkSpec(body, "");
}

absl::StatusOr<ExecRequestBody> ParseExecRequest(const json& body, const RequestLimits& limits) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(body));
  ExecRequestBody r;
  if (const json* argv = f.Raw("argv")) {
    if (!argv->is_array()) return InvalidField("argv", "argv must be a list of strings");
    size_t total = 0;
    for (const json& a : *argv) {
      if (!a.is_string()) return InvalidField("argv", "argv must be a list of strings");
      std::string s = a.get<std::string>();
      if (HasNul(s)) return InvalidField("argv", "argv holds a NUL byte");
      if (s.size() + 1 > kMaxArgStrlen) {
        return InvalidField(absl::StrCat("argv[", r.argv.size(), "]"),
                            absl::StrCat("an argument may be at most ", kMaxArgStrlen - 1, " bytes"));
      }
      total += s.size();
      r.argv.push_back(std::move(s));
    }
    if (r.argv.size() > trajectory::kMaxArgv || total > trajectory::kMaxArgBytes / 2) {
      return InvalidField("argv", "argv is too long");
    }
  }
  DSEC_ASSIGN_OR_RETURN(r.code, f.OptString("code", trajectory::kMaxArgBytes / 2));
  if (r.code && r.code->empty()) return InvalidField("code", "code must not be empty");
  DSEC_ASSIGN_OR_RETURN(auto stdin_text, f.OptString("stdin", kMaxStdinText));
  DSEC_ASSIGN_OR_RETURN(auto stdin_b64, f.OptString("stdin_b64", 2 * kMaxStdinText));
  if (stdin_text && stdin_b64) return InvalidField("stdin_b64", "give stdin or stdin_b64, not both");
  if (stdin_text) r.stdin_data = std::move(*stdin_text);
  if (stdin_b64 && !absl::Base64Unescape(*stdin_b64, &r.stdin_data)) {
    return InvalidField("stdin_b64", "stdin_b64 is not valid base64");
  }
  if (const json* env = f.Raw("env")) {
    if (!env->is_object()) return InvalidField("env", "env must be an object of strings");
    if (env->size() > kMaxEnvVars) {
      return InvalidField("env", absl::StrCat("env may hold at most ", kMaxEnvVars, " variables"));
    }
    size_t total = 0;
    for (auto kv = env->begin(); kv != env->end(); ++kv) {
      const std::string& k = kv.key();
      if (k.empty() || k.find('=') != std::string::npos || HasNul(k)) {
        return InvalidField("env", absl::StrCat("invalid variable name \"", k, "\""));
      }
      if (!kv->is_string() || HasNul(kv->get<std::string>())) {
        return InvalidField("env", absl::StrCat("env.", k, " must be a string without NUL"));
      }
      const size_t entry = k.size() + 1 + kv->get_ref<const std::string&>().size() + 1;  // NAME=value NUL
      if (entry > kMaxArgStrlen) {
        return InvalidField(absl::StrCat("env.", k), absl::StrCat("env.", k, " is ", entry,
                                                                 " bytes as NAME=value: over the limit of ",
                                                                 kMaxArgStrlen, " bytes per variable"));
      }
      total += entry;
      if (total > kMaxEnvBytes) {
        return InvalidField("env", absl::StrCat("env is over the limit of ", kMaxEnvBytes, " bytes in all"));
      }
      r.env[k] = kv->get<std::string>();
    }
  }
  DSEC_ASSIGN_OR_RETURN(auto cwd, f.OptString("cwd", kMaxPath));
  if (cwd) {
    if (cwd->empty() || (*cwd)[0] != '/' || HasNul(*cwd)) {
      return InvalidField("cwd", "cwd must be an absolute path");
    }
    r.cwd = std::move(*cwd);
  }
  DSEC_ASSIGN_OR_RETURN(r.timeout_s, f.OptInt("timeout_s", 1, limits.max_timeout_s));
  DSEC_ASSIGN_OR_RETURN(auto idempotent, f.OptBool("idempotent"));
  r.idempotent = idempotent.value_or(false);
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  return r;
}

absl::StatusOr<PackDiffRequest> ParsePackDiffRequest(const json& body) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(body));
  PackDiffRequest r;
  DSEC_ASSIGN_OR_RETURN(r.name, LayerNamePart(f, "name"));
  DSEC_ASSIGN_OR_RETURN(r.version, LayerNamePart(f, "version"));
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  return r;
}

absl::StatusOr<ForkRequest> ParseForkRequest(const json& body, const RequestLimits& limits) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(body));
  ForkRequest r;
  DSEC_ASSIGN_OR_RETURN(std::optional<int64_t> count, f.OptInt("count", 1, kMaxForkCount));
  if (count) r.count = *count;
  DSEC_ASSIGN_OR_RETURN(r.ttl_s, f.OptInt("ttl_s", 1, limits.max_ttl_s));
  DSEC_ASSIGN_OR_RETURN(auto tasks, f.OptStringList("task_ids", kMaxForkCount, 128));
  if (tasks) {
    if (static_cast<int64_t>(tasks->size()) != r.count) {
      return InvalidField("task_ids", absl::StrCat("task_ids needs one task per child: ", r.count));
    }
    for (size_t i = 0; i < tasks->size(); ++i) {
      if (!trajectory::ValidateTaskId((*tasks)[i]).ok()) {
        return InvalidField(JsonFields::ItemPath("task_ids", i),
                            "a task id is 1-128 characters of [A-Za-z0-9._-], not starting with '.'");
      }
      for (size_t j = 0; j < i; ++j) {
        if ((*tasks)[i] == (*tasks)[j]) {
          return InvalidField(JsonFields::ItemPath("task_ids", i), "task_ids must be distinct");
        }
      }
    }
    r.task_ids = std::move(*tasks);
  }
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  return r;
}

absl::StatusOr<uint32_t> ParseFileMode(std::string_view mode) {
  if (mode.empty()) return 0644;
  if (mode.size() > 5 || mode.find_first_not_of("01234567") != std::string_view::npos) {
    return InvalidField("mode", "mode must be octal, e.g. 0644");
  }
  uint32_t m = 0;
  for (char c : mode) m = m * 8 + static_cast<uint32_t>(c - '0');
  if (m > 07777) return InvalidField("mode", "mode must be at most 07777");
  return m;
}

absl::StatusOr<AddLayerRequest> ParseAddLayerRequest(const json& body) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(body));
  AddLayerRequest r;
  DSEC_ASSIGN_OR_RETURN(r.name, LayerNamePart(f, "name"));
  DSEC_ASSIGN_OR_RETURN(r.version, LayerNamePart(f, "version"));
  DSEC_ASSIGN_OR_RETURN(auto path, f.OptString("path", kMaxPath));
  if (!path || path->empty() || (*path)[0] != '/' || HasNul(*path)) {
    return InvalidField("path", "path must be an absolute directory on the host");
  }
  r.path = std::move(*path);
  DSEC_ASSIGN_OR_RETURN(r.parent, f.OptString("parent", kMaxLayerRef));
  if (r.parent && r.parent->empty()) return InvalidField("parent", "parent must be a layer reference");
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  return r;
}

}  // namespace dsec::daemon
