// SPDX-License-Identifier: Apache-2.0
// E2B's request and answer documents (e2b-dev/infra spec/openapi.yml for
// the control plane; envd's process.proto and filesystem.proto in their
// protobuf-JSON form for the data plane), translated to and from the node
// API's (docs/api.yaml) by pure functions: no I/O, every error naming the
// field, fuzzed (fuzz/wire_fuzzer.cc). What E2B has and dsec-vmm does not is
// Unimplemented naming the field, so that the server answers 501.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace dsec::e2b {

// What the node reports as the envd it speaks. The SDK gates features on
// it: >= 0.1.0 to use a sandbox at all, >= 0.4.0 sends no default user,
// >= 0.5.7 may upload application/octet-stream. 0.5.7 is the newest whose
// gated calls this server answers (or refuses with 501 where listed in
// docs/e2b.md); closeStdin (0.5.2) is among the refused.
inline constexpr char kEnvdVersion[] = "0.5.7";

// A template: a named stack of layers (store references, bottom first) on
// a tier, with optional size. E2B's templateID names one.
struct Template {
  std::string name;
  std::string tier = "container";
  std::vector<std::string> layers;  // empty: the tier's default layers
  std::optional<double> cpus;
  std::optional<uint64_t> memory_mib;
  std::optional<std::string> qos;  // "ls" | "be": the node's QoS placement
};
// "NAME=REF[,REF...]" (a daemon flag); NAME of [A-Za-z0-9_.:-], 1..128.
absl::StatusOr<Template> ParseTemplateFlag(absl::string_view flag);
// {"templates": {"NAME": {"layers": [...], "tier"?, "cpus"?, "memory_mib"?, "qos"?}}}
absl::StatusOr<std::map<std::string, Template>> ParseTemplateFile(const nlohmann::json& doc);
nlohmann::json TemplateFileJson(const std::map<std::string, Template>& templates);
absl::Status ValidateTemplateName(absl::string_view name);

// POST /sandboxes and /v2/sandboxes (NewSandbox).
struct CreateRequest {
  std::string template_id;
  int64_t timeout_s = 15;  // E2B's default
  nlohmann::json metadata = nlohmann::json::object();  // string -> string
  std::map<std::string, std::string> env_vars;         // every command's
  // metadata["dsec_task_id"]: the node's task whose trajectory log records
  // every command of the sandbox (sandbox/trajectory); checked by the node.
  std::optional<std::string> task_id;
};
inline constexpr char kTaskMetadataKey[] = "dsec_task_id";
absl::StatusOr<CreateRequest> ParseCreateRequest(const nlohmann::json& body, int64_t max_timeout_s);
// The node API's create body for a template, a TTL and a task.
nlohmann::json NodeCreateBody(const Template& t, int64_t ttl_s, const std::optional<std::string>& task_id);
// {"timeout": seconds} (POST .../timeout, .../connect) or {"duration"}
// (.../refreshes): the seconds, nullopt when the field is absent.
absl::StatusOr<std::optional<int64_t>> ParseSecondsField(const nlohmann::json& body, const char* field,
                                                         int64_t max_s);

// process.StartRequest.
struct StartRequest {
  std::string cmd;
  std::vector<std::string> args;
  std::map<std::string, std::string> envs;
  std::string cwd;
  std::optional<std::string> tag;
  bool stdin = false;  // stdin stays open for SendInput until CloseStdin
};
absl::StatusOr<StartRequest> ParseStartRequest(const nlohmann::json& body);
// SendInput's bytes for stdin ({"input": {"stdin": base64}}); input for a
// PTY is unimplemented.
absl::StatusOr<std::string> ParseStdinInput(const nlohmann::json& body);
// The node API's exec body: argv = cmd + args, env = defaults overlaid by
// the request's, timeout_s from Connect-Timeout-Ms (< 0: absent, the
// node's default; 0: E2B's "no limit", the longest the node allows).
nlohmann::json NodeExecBody(const StartRequest& req, const std::map<std::string, std::string>& defaults,
                            int64_t timeout_ms, int64_t max_timeout_s);
// process.ProcessSelector inside {"process": {...}}: a pid or a tag.
struct Selector {
  std::optional<uint32_t> pid;
  std::optional<std::string> tag;
};
absl::StatusOr<Selector> ParseSelector(const nlohmann::json& body);
// SendSignal's `signal`: envd's enum by name ("SIGNAL_SIGKILL",
// "SIGNAL_SIGTERM") or number (9, 15), as the signal number.
absl::StatusOr<int> ParseSignal(const nlohmann::json& body);

// The last NDJSON line of a streamed node exec ({"exit": result} or
// {"error": {...}}) as the end of an E2B process stream: the EndEvent
// message, or the error the stream ends with (a timed-out command is
// deadline_exceeded, as envd's context deadline is).
struct ProcessEnd {
  absl::Status status;
  nlohmann::json end_event;  // {"event": {"end": {...}}} when status is OK
};
ProcessEnd ProcessEndOf(const nlohmann::json& last_line);
// A node output line {"stream", "data_b64"} as a DataEvent message.
absl::StatusOr<nlohmann::json> DataEventOf(const nlohmann::json& line);
// A node API error body's code name (INVALID_ARGUMENT ...) as a status code.
absl::StatusCode CodeOfName(absl::string_view name);

// filesystem.*Request paths: a field that must be a non-empty string.
absl::StatusOr<std::string> ParsePathField(const nlohmann::json& body, const char* field);
// Relative paths are taken from / (envd takes them from the user's home;
// here commands run as the sandbox root with / as their default cwd, so
// files and commands agree). Removes a trailing slash (but of "/").
std::string AbsolutePath(absl::string_view path);
std::string ParentOf(absl::string_view abs_path);
std::string BaseName(absl::string_view abs_path);
// ListDirRequest's depth: 1 when absent, at most `max_depth`.
absl::StatusOr<uint32_t> ParseDepth(const nlohmann::json& body, uint32_t max_depth);
// WatchDirRequest / CreateWatcherRequest: the directory and whether to
// watch below it. includeEntry (an entry with each event) is refused by
// name; allowNetworkMounts is accepted (a sandbox has no network mounts).
struct WatchRequest {
  std::string path;
  bool recursive = false;
};
absl::StatusOr<WatchRequest> ParseWatchRequest(const nlohmann::json& body);
// GetWatcherEventsRequest / RemoveWatcherRequest: the watcher's id.
absl::StatusOr<std::string> ParseWatcherId(const nlohmann::json& body);
// filesystem.EntryInfo from a node file entry {"name", "type", "size",
// "mode"} at `path`.
nlohmann::json EntryInfoJson(const std::string& path, const nlohmann::json& node_entry);
// "-rwxr-xr-x" for a mode and node type.
std::string PermissionsString(uint32_t mode, absl::string_view type);

// The control plane's error body (E2B's Error schema): {"code": http, "message"}.
nlohmann::json ApiErrorJson(int http_status, absl::string_view message);

// Constant-time comparison of a presented key with one configured key.
bool KeyMatches(absl::string_view presented, absl::string_view key);

}  // namespace dsec::e2b
