// SPDX-License-Identifier: Apache-2.0
#include "base/json_fields.h"

#include <cmath>
#include <limits>

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dsec {

namespace {
constexpr char kFieldPayload[] = "dsec.dev/field";
}  // namespace

absl::Status InvalidField(std::string_view field, std::string_view message) {
  absl::Status s = absl::InvalidArgumentError(absl::string_view(message.data(), message.size()));
  s.SetPayload(kFieldPayload, absl::Cord(absl::string_view(field.data(), field.size())));
  return s;
}

std::optional<std::string> FieldOf(const absl::Status& status) {
  auto p = status.GetPayload(kFieldPayload);
  if (!p) return std::nullopt;
  return std::string(*p);
}

absl::StatusOr<JsonFields> JsonFields::Of(const nlohmann::json& value, std::string path) {
  if (!value.is_object()) {
    return InvalidField(path, path.empty() ? std::string("the body must be a JSON object")
                                           : absl::StrCat(path, " must be a JSON object"));
  }
  return JsonFields(&value, std::move(path));
}

std::string JsonFields::Path(std::string_view key) const {
  if (path_.empty()) return std::string(key);
  return absl::StrCat(path_, ".", absl::string_view(key.data(), key.size()));
}

std::string JsonFields::ItemPath(std::string_view array_path, size_t index) {
  return absl::StrCat(absl::string_view(array_path.data(), array_path.size()), "[", index, "]");
}

const nlohmann::json* JsonFields::Find(std::string_view key) {
  read_.emplace(key);
  auto it = object_->find(std::string(key));
  if (it == object_->end() || it->is_null()) return nullptr;
  return &*it;
}

const nlohmann::json* JsonFields::Raw(std::string_view key) { return Find(key); }

absl::StatusOr<std::optional<std::string>> JsonFields::OptString(std::string_view key,
                                                                  size_t max_bytes) {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return std::optional<std::string>();
  const std::string path = Path(key);
  if (!v->is_string()) return InvalidField(path, absl::StrCat(path, " must be a string"));
  std::string s = v->get<std::string>();
  if (s.size() > max_bytes) {
    return InvalidField(path, absl::StrCat(path, " is longer than ", max_bytes, " bytes"));
  }
  return std::optional<std::string>(std::move(s));
}

absl::StatusOr<std::string> JsonFields::String(std::string_view key, size_t max_bytes) {
  absl::StatusOr<std::optional<std::string>> s = OptString(key, max_bytes);
  if (!s.ok()) return s.status();
  if (!s->has_value()) {
    const std::string path = Path(key);
    return InvalidField(path, absl::StrCat(path, " is required"));
  }
  return **s;
}

absl::StatusOr<uint64_t> JsonFields::Uint(std::string_view key, uint64_t lo, uint64_t hi) {
  absl::StatusOr<std::optional<uint64_t>> v = OptUint(key, lo, hi);
  if (!v.ok()) return v.status();
  if (!v->has_value()) {
    const std::string path = Path(key);
    return InvalidField(path, absl::StrCat(path, " is required"));
  }
  return **v;
}

absl::StatusOr<bool> JsonFields::Bool(std::string_view key) {
  absl::StatusOr<std::optional<bool>> v = OptBool(key);
  if (!v.ok()) return v.status();
  if (!v->has_value()) {
    const std::string path = Path(key);
    return InvalidField(path, absl::StrCat(path, " is required"));
  }
  return **v;
}

absl::StatusOr<std::string> JsonFields::Bytes(std::string_view key, size_t min_bytes,
                                              size_t max_bytes) {
  // Base64 is 4 characters per 3 bytes.
  absl::StatusOr<std::string> text = String(key, (max_bytes + 2) / 3 * 4);
  if (!text.ok()) return text.status();
  const std::string path = Path(key);
  std::string out;
  if (!absl::Base64Unescape(*text, &out)) {
    return InvalidField(path, absl::StrCat(path, " is not valid base64"));
  }
  if (out.size() < min_bytes || out.size() > max_bytes) {
    return InvalidField(path, min_bytes == max_bytes
                                  ? absl::StrCat(path, " must hold ", min_bytes, " bytes, not ",
                                                 out.size())
                                  : absl::StrCat(path, " must hold ", min_bytes, "..", max_bytes,
                                                 " bytes, not ", out.size()));
  }
  return out;
}

absl::StatusOr<std::optional<int64_t>> JsonFields::OptInt(std::string_view key, int64_t lo,
                                                           int64_t hi) {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return std::optional<int64_t>();
  const std::string path = Path(key);
  if (!v->is_number_integer()) return InvalidField(path, absl::StrCat(path, " must be an integer"));
  const bool too_big = v->is_number_unsigned() &&
                       v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  const int64_t x = too_big ? std::numeric_limits<int64_t>::max() : v->get<int64_t>();
  if (too_big || x < lo || x > hi) {
    return InvalidField(path, absl::StrCat(path, " must be between ", lo, " and ", hi));
  }
  return std::optional<int64_t>(x);
}

absl::StatusOr<std::optional<uint64_t>> JsonFields::OptUint(std::string_view key, uint64_t lo,
                                                             uint64_t hi) {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return std::optional<uint64_t>();
  const std::string path = Path(key);
  if (!v->is_number_integer()) return InvalidField(path, absl::StrCat(path, " must be an integer"));
  if (!v->is_number_unsigned() && v->get<int64_t>() < 0) {
    return InvalidField(path, absl::StrCat(path, " must be between ", lo, " and ", hi));
  }
  const uint64_t x = v->get<uint64_t>();
  if (x < lo || x > hi) {
    return InvalidField(path, absl::StrCat(path, " must be between ", lo, " and ", hi));
  }
  return std::optional<uint64_t>(x);
}

absl::StatusOr<std::optional<double>> JsonFields::OptNumber(std::string_view key, double lo,
                                                             double hi) {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return std::optional<double>();
  const std::string path = Path(key);
  if (!v->is_number()) return InvalidField(path, absl::StrCat(path, " must be a number"));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    return InvalidField(path, absl::StrCat(path, " must be between ", lo, " and ", hi));
  }
  return std::optional<double>(x);
}

absl::StatusOr<std::optional<bool>> JsonFields::OptBool(std::string_view key) {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return std::optional<bool>();
  const std::string path = Path(key);
  if (!v->is_boolean()) return InvalidField(path, absl::StrCat(path, " must be true or false"));
  return std::optional<bool>(v->get<bool>());
}

absl::StatusOr<std::optional<std::vector<std::string>>> JsonFields::OptStringList(
    std::string_view key, size_t max_items, size_t max_bytes) {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return std::optional<std::vector<std::string>>();
  const std::string path = Path(key);
  if (!v->is_array() || v->size() > max_items) {
    return InvalidField(path, absl::StrCat(path, " must be a list of at most ", max_items, " strings"));
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const nlohmann::json& item = (*v)[i];
    if (!item.is_string() || item.get<std::string>().empty() ||
        item.get<std::string>().size() > max_bytes) {
      const std::string ipath = ItemPath(path, i);
      return InvalidField(ipath, absl::StrCat(ipath, " must be a non-empty string of at most ",
                                              max_bytes, " bytes"));
    }
    out.push_back(item.get<std::string>());
  }
  return std::optional<std::vector<std::string>>(std::move(out));
}

absl::StatusOr<std::optional<std::string>> JsonFields::OptEnum(
    std::string_view key, const std::vector<std::string_view>& allowed) {
  absl::StatusOr<std::optional<std::string>> s = OptString(key, 256);
  if (!s.ok() || !s->has_value()) return s;
  for (std::string_view a : allowed) {
    if (**s == a) return s;
  }
  const std::string path = Path(key);
  std::vector<std::string> names(allowed.begin(), allowed.end());
  return InvalidField(path, absl::StrCat(path, " must be one of ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<std::optional<size_t>> JsonFields::OptChoice(
    std::string_view key, const std::vector<std::string_view>& allowed) {
  absl::StatusOr<std::optional<std::string>> s = OptEnum(key, allowed);
  if (!s.ok()) return s.status();
  if (!s->has_value()) return std::optional<size_t>();
  for (size_t i = 0; i < allowed.size(); ++i) {
    if (allowed[i] == std::string_view(**s)) return std::optional<size_t>(i);
  }
  return absl::InternalError("OptChoice: value not among the allowed ones");
}

absl::Status JsonFields::RejectUnknown() const {
  for (auto it = object_->begin(); it != object_->end(); ++it) {
    if (read_.find(it.key()) == read_.end()) {
      const std::string path = Path(it.key());
      return InvalidField(path, absl::StrCat("unknown field ", path));
    }
  }
  return absl::OkStatus();
}

}  // namespace dsec
