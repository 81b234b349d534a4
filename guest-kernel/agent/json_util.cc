// SPDX-License-Identifier: Apache-2.0
#include "guest-kernel/agent/json_util.h"

#include <limits>
#include <utility>

namespace dsec::agent::internal {

json BytesToJson(std::string_view b) {
  if (IsValidUtf8(b)) return json(std::string(b));
  json j = json::object();
  j["b64"] = Base64Encode(b);
  return j;
}

Frame JsonFrame(MsgType type, const json& j) {
  Frame f;
  f.type = type;
  try {
    // Every string we put in is valid UTF-8 except possibly environment
    // keys; `replace` keeps dump() from throwing on those.
    f.payload = j.dump(-1, ' ', false, json::error_handler_t::replace);
  } catch (const json::exception&) {
    f.payload = "{}";
  }
  return f;
}

absl::Status WrongType(const Frame& f, MsgType want) {
  return absl::InvalidArgumentError(
      absl::StrCat("protocol: expected a ", TypeName(want), " frame, got ", TypeName(f.type)));
}

absl::StatusOr<json> ParseObject(const Frame& f, MsgType want) {
  if (f.type != want) return WrongType(f, want);
  json j;
  try {
    j = json::parse(f.payload, nullptr, /*allow_exceptions=*/false);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("protocol: ", TypeName(want), ": ", e.what()));
  }
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat("protocol: ", TypeName(want), " payload is not valid JSON"));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("protocol: ", TypeName(want), " payload is not a JSON object"));
  }
  return j;
}

void Fields::Fail(std::string_view key, const std::string& why) {
  if (status_.ok()) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("protocol: ", what_, ".", std::string(key), ": ", why));
  }
}

const json* Fields::Find(const char* key, bool required) {
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) {
    if (required) Fail(key, "missing");
    return nullptr;
  }
  return &*it;
}

uint64_t Fields::U64(const char* key, uint64_t def, bool required) {
  const json* v = Find(key, required);
  if (v == nullptr) return def;
  return U64Of(*v, key, def);
}

uint64_t Fields::U64Of(const json& v, std::string_view key, uint64_t def) {
  if (!v.is_number_unsigned()) {
    Fail(key, "must be a non-negative integer");
    return def;
  }
  return v.get<uint64_t>();
}

uint32_t Fields::U32(const char* key, uint32_t def, bool required, uint32_t max) {
  uint64_t v = U64(key, def, required);
  if (v > max) {
    Fail(key, absl::StrCat("out of range (max ", max, ")"));
    return def;
  }
  return static_cast<uint32_t>(v);
}

std::optional<int64_t> Fields::OptI64(const char* key) {
  const json* v = Find(key, false);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      Fail(key, "out of range");
      return std::nullopt;
    }
    return static_cast<int64_t>(u);
  }
  if (!v->is_number_integer()) {
    Fail(key, "must be an integer");
    return std::nullopt;
  }
  return v->get<int64_t>();
}

int64_t Fields::I64(const char* key, int64_t def, bool required) {
  if (required) Find(key, true);
  return OptI64(key).value_or(def);
}

std::optional<int> Fields::OptInt(const char* key) {
  std::optional<int64_t> v = OptI64(key);
  if (!v) return std::nullopt;
  if (*v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max()) {
    Fail(key, "out of range");
    return std::nullopt;
  }
  return static_cast<int>(*v);
}

bool Fields::Bool(const char* key, bool def) {
  const json* v = Find(key, false);
  if (v == nullptr) return def;
  if (!v->is_boolean()) {
    Fail(key, "must be a boolean");
    return def;
  }
  return v->get<bool>();
}

std::string Fields::Str(const char* key, bool required) {
  const json* v = Find(key, required);
  if (v == nullptr) return "";
  if (!v->is_string()) {
    Fail(key, "must be a string");
    return "";
  }
  return v->get<std::string>();
}

std::string Fields::BytesOf(const json& v, std::string_view key) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object()) {
    auto it = v.find("b64");
    if (it != v.end() && it->is_string() && v.size() == 1) {
      absl::StatusOr<std::string> d = Base64Decode(it->get_ref<const std::string&>());
      if (d.ok()) return *std::move(d);
      Fail(key, std::string(d.status().message()));
      return "";
    }
  }
  Fail(key, "must be a string or {\"b64\": string}");
  return "";
}

std::string Fields::Bytes(const char* key, bool required) {
  const json* v = Find(key, required);
  if (v == nullptr) return "";
  return BytesOf(*v, key);
}

const json* Fields::Array(const char* key, bool required) {
  const json* v = Find(key, required);
  if (v != nullptr && !v->is_array()) {
    Fail(key, "must be an array");
    return nullptr;
  }
  return v;
}

}  // namespace dsec::agent::internal
