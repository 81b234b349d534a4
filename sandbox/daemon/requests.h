// SPDX-License-Identifier: Apache-2.0
// The daemon's request bodies (docs/api.yaml) as typed structs, parsed by
// pure functions: types, ranges and unknown fields are checked here, every
// error an InvalidArgument naming the field (base/json_fields.h). What
// depends on the tier (its own create options, whether it runs argv or
// code, defaults) is checked against the tier's traits afterwards
// (sandbox/tier). Fuzzed: fuzz/requests_fuzzer.cc.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sandbox/network/policy.h"

namespace dsec::daemon {

// Bounds that come from the daemon's options.
struct RequestLimits {
  int64_t max_ttl_s = 7 * 24 * 3600;
  int64_t max_timeout_s = 3600;
};

// POST /v1/sandboxes, and the body of POST /v1/tasks/{t}/resume.
struct CreateRequest {
  std::string tier;
  std::vector<std::string> layers;  // references; empty = the tier's defaults
  std::optional<double> cpus;
  std::optional<uint64_t> memory_mib;
  std::optional<uint64_t> pids;
  std::optional<std::string> qos;  // "ls" | "be"
  std::optional<int64_t> ttl_s;
  std::optional<std::string> task_id;
  // The sandbox's network and egress policy (sandbox/network/policy.h);
  // absent or null: no network (an empty namespace).
  std::optional<network::NetworkSpec> network;
  // Every other field, unread: the named tier's own options ("lang",
  // "user_namespace"), which its traits check (tier::ParseTierOptions),
  // refusing unknown ones.
  nlohmann::json tier_fields = nlohmann::json::object();
};
absl::StatusOr<CreateRequest> ParseCreateRequest(const nlohmann::json& body, const RequestLimits& limits);

// POST /v1/sandboxes/{id}/exec (and exec/stream).
struct ExecRequestBody {
  std::vector<std::string> argv;
  std::optional<std::string> code;
  std::string stdin_data;  // from stdin (text) or stdin_b64
  std::map<std::string, std::string> env;
  std::string cwd;  // "" = the tier's default
  std::optional<int64_t> timeout_s;
  bool idempotent = false;
};
absl::StatusOr<ExecRequestBody> ParseExecRequest(const nlohmann::json& body, const RequestLimits& limits);

// PATCH /v1/sandboxes/{id}/network: a whole new policy, fields named
// "egress.allow[i]".
absl::StatusOr<network::NetworkSpec> ParseNetworkPatch(const nlohmann::json& body);

// POST /v1/sandboxes/{id}/pack_diff.
struct PackDiffRequest {
  std::string name;
  std::string version;
};
absl::StatusOr<PackDiffRequest> ParsePackDiffRequest(const nlohmann::json& body);

// POST /v1/sandboxes/{id}/fork: `count` sandboxes (1..kMaxForkCount,
// default 1) in the state of the source's file system; `ttl_s` for each
// (default none); `task_ids`, one new task per child (exactly `count`,
// distinct), whose logs start with the source's trajectory.
inline constexpr int64_t kMaxForkCount = 64;
struct ForkRequest {
  int64_t count = 1;
  std::optional<int64_t> ttl_s;
  std::vector<std::string> task_ids;
};
absl::StatusOr<ForkRequest> ParseForkRequest(const nlohmann::json& body, const RequestLimits& limits);

// The `mode` query parameter of PUT /v1/sandboxes/{id}/files: octal, at
// most 07777; "" is 0644.
absl::StatusOr<uint32_t> ParseFileMode(std::string_view mode);

// POST /v1/layers.
struct AddLayerRequest {
  std::string name;
  std::string version;
  std::string path;  // an absolute directory on the host
  std::optional<std::string> parent;
};
absl::StatusOr<AddLayerRequest> ParseAddLayerRequest(const nlohmann::json& body);

}  // namespace dsec::daemon
