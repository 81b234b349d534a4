// SPDX-License-Identifier: Apache-2.0
#include "sandbox/layers/layer_metadata.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace dsec::layers {

std::string LayerMetadata::Hex() const {
  return digest.size() > 7 ? digest.substr(7) : std::string();
}

bool IsDigest(const std::string& s) {
  if (s.size() != 7 + 64 || s.rfind("sha256:", 0) != 0) return false;
  for (size_t i = 7; i < s.size(); ++i) {
    char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool IsValidNameComponent(const std::string& s) {
  if (s.empty() || s.size() > 128 || s[0] == '.' || s[0] == '-') return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '+' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string LayerMetadataToJson(const LayerMetadata& m) {
  nlohmann::json j = {
      {"name", m.name},       {"version", m.version},
      {"digest", m.digest},   {"parents", m.parents},
      {"size", m.size},       {"content_bytes", m.content_bytes},
      {"entries", m.entries}, {"created", m.created},
      {"source", m.source},   {"compression", m.compression},
  };
  return j.dump(2) + "\n";
}

absl::StatusOr<LayerMetadata> LayerMetadataFromJson(const std::string& json) {
  LayerMetadata m;
  try {
    nlohmann::json j = nlohmann::json::parse(json);
    m.name = j.at("name").get<std::string>();
    m.version = j.at("version").get<std::string>();
    m.digest = j.at("digest").get<std::string>();
    m.parents = j.at("parents").get<std::vector<std::string>>();
    m.size = j.at("size").get<uint64_t>();
    m.content_bytes = j.value("content_bytes", uint64_t{0});
    m.entries = j.value("entries", uint64_t{0});
    m.created = j.at("created").get<std::string>();
    m.source = j.value("source", std::string());
    m.compression = j.value("compression", std::string("none"));
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("layer metadata: ", e.what()));
  }
  if (!IsDigest(m.digest)) {
    return absl::InvalidArgumentError(absl::StrCat("layer metadata: bad digest '", m.digest, "'"));
  }
  if (m.compression.empty()) {
    return absl::InvalidArgumentError("layer metadata: empty compression (use \"none\")");
  }
  for (const auto& p : m.parents) {
    if (!IsDigest(p)) return absl::InvalidArgumentError(absl::StrCat("layer metadata: bad parent '", p, "'"));
  }
  return m;
}

}  // namespace dsec::layers
