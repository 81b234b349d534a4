// SPDX-License-Identifier: Apache-2.0
// The content address of a layer: SHA-256 over a canonical serialisation of
// a directory tree (not over image bytes), so that identical trees dedupe
// whatever tool produced the image.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/layers/sha256.h"

namespace dsec::layers {

struct TreeStats {
  uint64_t regular_files = 0;
  uint64_t directories = 0;
  uint64_t other_entries = 0;  // symlinks, devices (whiteouts), fifos, sockets
  uint64_t content_bytes = 0;  // sum of regular file sizes (hard links once)
  int64_t max_mtime_sec = 0;   // newest mtime in the tree (for mkfs.erofs)
};

struct TreeDigest {
  Sha256Digest digest{};
  TreeStats stats;
  // "sha256:<hex>", the form stored in metadata and accepted as a reference.
  std::string Name() const { return "sha256:" + ToHex(digest); }
};

// Walks `root` depth-first with entries sorted bytewise by name, hashing for
// each entry: its path relative to `root`, file type and full mode (set-id
// and sticky bits included), uid, gid, extended attributes (name and value,
// sorted), and per type: file size and content hash, or "hard link to the
// earlier path" for a further name of an inode already seen, symlink target,
// device major/minor. Timestamps are deliberately left out: the same tree
// unpacked at another time has the same digest. `parents` (layer digests,
// bottom first) are hashed after the tree, because a diff layer means
// something only on top of its parents.
absl::StatusOr<TreeDigest> DigestTree(const std::string& root,
                                      const std::vector<std::string>& parents = {});

}  // namespace dsec::layers
