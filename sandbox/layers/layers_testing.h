// SPDX-License-Identifier: Apache-2.0
// Test helpers for sandbox/layers (linked only into tests): temporary
// directories, tree snapshots to compare two views entry by entry, and a
// child process in a private mount namespace, so that no mount a test makes
// can outlive it, whatever the test's outcome.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sandbox/layers/fs_util.h"

namespace dsec::layers::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on
// destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& rel) const { return JoinPath(path_, rel); }

 private:
  std::string path_;
};

// Writes (creating or truncating) a file; mkdir -p of its parent.
absl::Status WriteFile(const std::string& path, const std::string& content, mode_t mode = 0644);

struct EntrySummary {
  char type = '?';  // d f l c b p s
  uint32_t mode = 0;  // permission bits incl. set-id and sticky
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t size = 0;       // files and symlinks only
  std::string content;     // SHA-256 hex of a file's data; target of a symlink
  uint64_t rdev = 0;
  uint64_t nlink = 0;      // non-directories only (overlayfs reports its own for dirs)
  int64_t mtime_sec = 0;
  int64_t mtime_nsec = 0;
  Xattrs xattrs;
};

// Every entry under `root` by relative path ("" is the root itself).
absl::StatusOr<std::map<std::string, EntrySummary>> SnapshotTree(const std::string& root);

// Human-readable differences between two snapshots, empty when equal.
// `compare_mtime` includes modification times.
std::vector<std::string> DiffSnapshots(const std::map<std::string, EntrySummary>& a,
                                       const std::map<std::string, EntrySummary>& b,
                                       bool compare_mtime);

// Runs `fn` in a forked child that first enters a new mount namespace with
// private propagation. The child's result comes back as a Status (code and
// message). Mounts made by `fn` die with the namespace when the child exits.
absl::Status RunInPrivateMountNamespace(const std::function<absl::Status()>& fn);

// Why integration tests cannot run here ("" when they can): root, mkfs.erofs.
std::string IntegrationSkipReason();

}  // namespace dsec::layers::testing
