// SPDX-License-Identifier: Apache-2.0
// What the store records about one layer, and its JSON form
// (<store>/layers/<hex>.json).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::layers {

struct LayerMetadata {
  std::string name;     // first name it was built under, e.g. "base"
  std::string version;  // e.g. "bookworm"
  std::string digest;   // "sha256:<hex>" of the tree and parents (tree_digest.h)
  std::vector<std::string> parents;  // digests of the layers below, bottom first
  uint64_t size = 0;           // image bytes
  uint64_t content_bytes = 0;  // regular file bytes in the tree
  uint64_t entries = 0;        // files + directories + other entries
  std::string created;  // RFC 3339 UTC, e.g. "2026-01-31T12:00:00Z"
  std::string source;   // where the tree came from, e.g. "dir:/src", "pack_diff:/upper"
  // How the image's file data is stored: "none" (uncompressed, DAX-capable:
  // pmem-dax can map it into microVMs) or the mkfs.erofs compressor spec it
  // was built with, e.g. "lz4hc" (container tier; erofs_image.h). Metadata
  // written before the field existed reads as "none".
  std::string compression = "none";

  // "<name>:<version>".
  std::string Tag() const { return name + ":" + version; }
  // The 64 hex digits of `digest` (file names in the store).
  std::string Hex() const;
};

// Pretty-printed JSON object with the keys name, version, digest, parents,
// size, content_bytes, entries, created, source, compression.
std::string LayerMetadataToJson(const LayerMetadata& m);
// InvalidArgument on malformed JSON, missing keys or a malformed digest.
absl::StatusOr<LayerMetadata> LayerMetadataFromJson(const std::string& json);

// True for "sha256:" followed by 64 lower-case hex digits.
bool IsDigest(const std::string& s);
// True for a layer name or version: 1-128 of [A-Za-z0-9._+-], not starting
// with '.' or '-'.
bool IsValidNameComponent(const std::string& s);

}  // namespace dsec::layers
