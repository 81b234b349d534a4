// SPDX-License-Identifier: Apache-2.0
// Strict reading of JSON objects from clients and config files: every field
// is typed and range-checked, unknown fields are refused, and every error is
// an InvalidArgument that names the field by its path ("devices[2].path")
// in the message and in a Status payload (FieldOf), so that an API answer
// can point at it. One way for the monitor's config, the device specs and the
// daemon's requests to read their input.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace dsec {

// InvalidArgument with `message`, naming `field` (a path) in its payload.
absl::Status InvalidField(std::string_view field, std::string_view message);
// The field an error names, if any.
std::optional<std::string> FieldOf(const absl::Status& status);

// A view of one JSON object that records which fields were read.
// Threads: one at a time; it does not own the JSON.
class JsonFields {
 public:
  // InvalidArgument naming `path` if `value` is not an object. `path` is the
  // object's own path ("" for the top level, "devices[2]").
  static absl::StatusOr<JsonFields> Of(const nlohmann::json& value, std::string path = "");

  // Optional fields: absent and null are nullopt. Integers must be JSON
  // integers within [lo, hi]; strings at most `max_bytes` long.
  absl::StatusOr<std::optional<std::string>> OptString(std::string_view key,
                                                        size_t max_bytes = 4096);
  absl::StatusOr<std::optional<int64_t>> OptInt(std::string_view key, int64_t lo, int64_t hi);
  absl::StatusOr<std::optional<uint64_t>> OptUint(std::string_view key, uint64_t lo, uint64_t hi);
  absl::StatusOr<std::optional<double>> OptNumber(std::string_view key, double lo, double hi);
  absl::StatusOr<std::optional<bool>> OptBool(std::string_view key);
  // A list of strings, each 1..max_bytes long, at most max_items of them.
  absl::StatusOr<std::optional<std::vector<std::string>>> OptStringList(std::string_view key,
                                                                        size_t max_items,
                                                                        size_t max_bytes = 4096);
  // A string that must be one of `allowed`; OptChoice gives its index.
  absl::StatusOr<std::optional<std::string>> OptEnum(std::string_view key,
                                                      const std::vector<std::string_view>& allowed);
  absl::StatusOr<std::optional<size_t>> OptChoice(std::string_view key,
                                                  const std::vector<std::string_view>& allowed);
  // Required forms: a missing or null field is an error naming it.
  absl::StatusOr<std::string> String(std::string_view key, size_t max_bytes = 4096);
  absl::StatusOr<uint64_t> Uint(std::string_view key, uint64_t lo, uint64_t hi);
  absl::StatusOr<bool> Bool(std::string_view key);
  // A base64 string (RFC 4648 with padding) of min_bytes..max_bytes bytes,
  // decoded; for binary state (snapshots).
  absl::StatusOr<std::string> Bytes(std::string_view key, size_t min_bytes, size_t max_bytes);

  // The raw value (nullptr when absent or null), marked as read; for nested
  // objects and arrays the caller reads with their own JsonFields.
  const nlohmann::json* Raw(std::string_view key);

  // "path.key" (or "key" at the top level); "path[i]" for array items.
  std::string Path(std::string_view key) const;
  static std::string ItemPath(std::string_view array_path, size_t index);

  // InvalidArgument naming the first field that was never read.
  absl::Status RejectUnknown() const;

 private:
  JsonFields(const nlohmann::json* object, std::string path)
      : object_(object), path_(std::move(path)) {}
  const nlohmann::json* Find(std::string_view key);

  const nlohmann::json* object_;
  std::string path_;
  std::set<std::string, std::less<>> read_;
};

}  // namespace dsec
