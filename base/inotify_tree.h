// SPDX-License-Identifier: Apache-2.0
// The inotify half of a directory watch (dir_watch.h) that every tier
// shares: one inotify instance, a watch per directory, directories made or
// moved in added as their events come, a directory moved within the tree
// renamed (its MOVED_FROM paired with the MOVED_TO of the same cookie), one
// moved out dropped, a bound on the directories held. Where directories are
// found is the tier's: a WatchedTree opens them under its own walls (the
// container tier's openat2 inside the sandbox's root with the sandbox's
// credentials; the guest agent's root).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/dir_watch.h"
#include "base/eventfd.h"
#include "base/scoped_fd.h"

namespace dsec {

// How a watch reaches the directories of one tree.
class WatchedTree {
 public:
  // One walk over directories: what it holds (credentials taken on, a
  // root opened) lasts until it goes. Used on one thread.
  class Walk {
   public:
    virtual ~Walk() = default;
    // `path` (absolute inside the tree, links followed within it) as an
    // O_PATH directory descriptor; errors name the path.
    virtual absl::StatusOr<ScopedFd> OpenDir(const std::string& path) = 0;
    // Whether a directory found below the watched one (reached without
    // following a link) is watched too: false for what the tier does not
    // serve (kernel file systems).
    virtual bool Serves(int fd, const std::string& path) = 0;
  };
  virtual ~WatchedTree() = default;
  virtual absl::StatusOr<std::unique_ptr<Walk>> BeginWalk() = 0;
};

// A DirWatch over inotify. The inotify descriptor is readable when events
// wait, for callers that poll it beside their own (then Next(0)).
class InotifyDirWatch final : public DirWatch {
 public:
  // Watches `path` in `tree` (with `recursive`, every directory below it
  // that the tree serves, links not followed), at most max_dirs (>= 1)
  // directories. Errors: the tree's for the directory; ResourceExhausted
  // for more than max_dirs directories or the host's inotify limits
  // (fs.inotify.max_user_watches, max_user_instances), named.
  static absl::StatusOr<std::unique_ptr<InotifyDirWatch>> Create(std::unique_ptr<WatchedTree> tree,
                                                                 std::string path, bool recursive,
                                                                 size_t max_dirs);

  absl::StatusOr<std::vector<FileEvent>> Next(int64_t timeout_ms) override;
  void Close() override { (void)closed_.Signal(); }
  int fd() const { return inotify_.get(); }

  // How many directories it watches now.
  size_t watched_dirs() const;

 private:
  struct Raw;

  InotifyDirWatch(std::unique_ptr<WatchedTree> tree, std::string path, bool recursive, size_t max_dirs,
                  ScopedFd inotify, EventFd closed);

  std::string AbsPath(const std::string& rel) const;
  // With `found`: a create for every entry already in the directories it
  // adds (made before their watch was: a directory made and filled at
  // once, or moved in with its contents).
  absl::Status AddTree(const std::string& rel, std::vector<FileEvent>* found = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropTree(const std::string& top) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Rename(const std::string& from, const std::string& to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A directory made or moved in: watched, and what it holds already
  // reported into `out` as created.
  void AddBelow(const std::string& rel, std::vector<FileEvent>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Fail(absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Translate(std::vector<Raw>& raw, size_t i, std::vector<FileEvent>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<WatchedTree> tree_;
  const std::string path_;
  const bool recursive_;
  const size_t max_dirs_;
  const ScopedFd inotify_;
  const EventFd closed_;
  mutable std::mutex mu_;
  // wd -> the directory's path relative to the watched one ("" for it), and back.
  std::map<int, std::string> dirs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> wds_ ABSL_GUARDED_BY(mu_);
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dsec
