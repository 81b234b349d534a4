// SPDX-License-Identifier: Apache-2.0
// Internal to dsec_agent_protocol: JSON payload helpers for messages.cc.
// Every accessor checks the JSON type first, so nlohmann-json never throws
// from here; DecodeWith still catches, as the project does not let a library
// exception escape.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "guest-kernel/agent/protocol.h"
#include "nlohmann/json.hpp"

namespace dsec::agent::internal {

using json = nlohmann::json;

// A byte string as JSON: a string if valid UTF-8, else {"b64": "..."}.
json BytesToJson(std::string_view b);
// A frame of `type` whose payload is `j`, compact.
Frame JsonFrame(MsgType type, const json& j);
absl::Status WrongType(const Frame& f, MsgType want);
// The payload as a JSON object, or InvalidArgument.
absl::StatusOr<json> ParseObject(const Frame& f, MsgType want);

// Reads typed fields from one JSON object, keeping the first error.
class Fields {
 public:
  Fields(const json& obj, MsgType type) : obj_(obj), what_(TypeName(type)) {}

  const absl::Status& status() const { return status_; }
  void Fail(std::string_view key, const std::string& why);
  // nullptr if absent or null (and records an error if required).
  const json* Find(const char* key, bool required);

  uint64_t U64(const char* key, uint64_t def, bool required = false);
  uint64_t U64Of(const json& v, std::string_view key, uint64_t def);
  uint32_t U32(const char* key, uint32_t def, bool required = false, uint32_t max = UINT32_MAX);
  std::optional<int64_t> OptI64(const char* key);
  int64_t I64(const char* key, int64_t def, bool required = false);
  std::optional<int> OptInt(const char* key);
  bool Bool(const char* key, bool def);
  // A plain (UTF-8) string.
  std::string Str(const char* key, bool required = false);
  // A byte string: a JSON string or {"b64": "..."}.
  std::string BytesOf(const json& v, std::string_view key);
  std::string Bytes(const char* key, bool required = false);
  // The field if it is an array (nullptr if absent; an error if not an array).
  const json* Array(const char* key, bool required = false);

 private:
  const json& obj_;
  std::string what_;
  absl::Status status_;
};

template <typename Fn>
absl::Status DecodeWith(const Frame& f, MsgType type, Fn&& fn) {
  absl::StatusOr<json> j = ParseObject(f, type);
  if (!j.ok()) return j.status();
  try {
    Fields r(*j, type);
    fn(r);
    return r.status();
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("protocol: ", TypeName(type), ": ", e.what()));
  }
}

}  // namespace dsec::agent::internal
