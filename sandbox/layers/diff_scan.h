// SPDX-License-Identifier: Apache-2.0
// The size and shape of an upper directory, measured before pack_diff
// copies anything, so that a sandbox's changes cannot make the node write
// more than it allows or hand mkfs.erofs a tree it cannot take: a sparse
// file holds no blocks in the sandbox's size-limited upper but is written
// whole into the layer (2 GiB from a 1 GiB upper), and mkfs.erofs recurses
// once per directory level (1,950 nested directories overflowed its stack)
// and builds full paths in PATH_MAX buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace dsec::layers {

struct DiffLimits {
  // Directory levels below the upper's root (a file in /a/b is at 3).
  int max_depth = 512;
  // Bytes of the longest path inside the layer ("/a/b/c").
  size_t max_path_bytes = 3072;
  // Entries of every kind.
  uint64_t max_entries = 4u << 20;
};

struct DiffSize {
  uint64_t entries = 0;
  uint64_t directories = 0;
  uint64_t content_bytes = 0;    // regular files' sizes (hard links once)
  uint64_t allocated_bytes = 0;  // their blocks: what a hole-keeping copy writes
  // An upper bound of the uncompressed EROFS image: each file's data in
  // whole 4 KiB blocks, a block per directory, 256 bytes per entry (inode,
  // directory entry, xattrs, symlink target).
  uint64_t image_bytes_estimate = 0;
};

// Walks `upper` (never following links) without descending past the
// limits. InvalidArgument when it exceeds one, naming the path inside the
// layer (never a host path); Internal for syscall failures.
absl::StatusOr<DiffSize> ScanDiff(const std::string& upper, const DiffLimits& limits = {});

}  // namespace dsec::layers
