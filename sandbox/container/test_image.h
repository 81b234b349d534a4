// SPDX-License-Identifier: Apache-2.0
// Test support: tiny root trees around a statically linked busybox, and
// EROFS images made from them with mkfs.erofs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::container::testing {

// A directory under /tmp removed (recursively, never across mounts) on
// destruction.
class TempDir {
 public:
  static absl::StatusOr<TempDir> Create(const std::string& prefix);
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&&) = delete;
  TempDir(const TempDir&) = delete;
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Path of a statically linked busybox on the host, or Unavailable naming
// the package (busybox-static).
absl::StatusOr<std::string> FindStaticBusybox();
// Path of mkfs.erofs, or Unavailable naming erofs-utils.
absl::StatusOr<std::string> FindMkfsErofs();

// dir/bin/busybox plus a symlink per applet, /etc/passwd and /etc/group.
absl::Status BuildBusyboxTree(const std::string& dir);
// Writes `content` to root/relpath (parents created) with `mode`.
absl::Status WriteTreeFile(const std::string& root, const std::string& relpath,
                           const std::string& content, unsigned mode = 0644);
// mkfs.erofs image dir.
absl::Status MakeErofs(const std::string& dir, const std::string& image);
// A busybox tree in work_dir/tree made into work_dir/base.erofs; returns
// the image. Unavailable (busybox-static or erofs-utils missing) is for
// the caller to skip on.
absl::StatusOr<std::string> BuildBusyboxImage(const std::string& work_dir);
// Runs argv (no shell), returns its stdout; non-zero exit is an error.
absl::StatusOr<std::string> RunHostCommand(const std::vector<std::string>& argv);
// 64-bit FNV-1a of a file's bytes (to show an image did not change).
absl::StatusOr<uint64_t> HashFile(const std::string& path);

}  // namespace dsec::container::testing
