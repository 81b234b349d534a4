// SPDX-License-Identifier: Apache-2.0
// Filesystem helpers of the layer store, the tree digest and pack_diff that
// base/file_io.h (ListDirectory, ReadFile, WriteFile, MakeDirs) does not
// offer. All take paths and never follow a final symlink.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/file_io.h"

namespace dsec::layers {

using Xattrs = std::vector<std::pair<std::string, std::string>>;

// "a" + "/" + "b", without doubling a trailing slash; `rel` empty gives `dir`.
std::string JoinPath(const std::string& dir, const std::string& rel);

// Extended attributes of `path` (not following a symlink), sorted by name.
// A filesystem without xattr support gives an empty list.
absl::StatusOr<Xattrs> ListXattrs(const std::string& path);

// Removes `path` and everything below it, not following symlinks. Missing
// is OK; a directory below that is a mount point is FailedPrecondition.
absl::Status RemoveTree(const std::string& path);

// Writes `content` to `path` atomically: a unique temporary file in the same
// directory, fsync, rename over `path`, fsync of the directory.
absl::Status WriteFileAtomic(const std::string& path, const std::string& content);

// Creates a fresh uniquely named directory `<parent>/<prefix>XXXXXX`.
absl::StatusOr<std::string> MakeTempDir(const std::string& parent, const std::string& prefix);

}  // namespace dsec::layers
