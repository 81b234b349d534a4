// SPDX-License-Identifier: Apache-2.0
// Read-only layer images mounted once per runtime process and shared by
// every sandbox and fncall pool that stacks them.
//
// Why: each mount(2) of an EROFS image makes its own superblock with its
// own page cache, filled from the image file's page cache by copying. With
// one mount per sandbox, N sandboxes that run python keep N + 1 copies of
// libpython in memory, and every sandbox's first exec takes major faults
// through the image file (measured here: a second and third mount of one
// image each added the whole file to "Cached"; `true` from a fresh mount
// spent ~0.4 ms in page faults). One shared superblock per image makes the
// container tier's layers cost what the architecture promises: one copy per
// node, warm for every new sandbox.
//
// How: each image is mounted detached (fsmount(2), no mount point, in no
// mount table) and handed to overlayfs as /proc/self/fd/N. An overlay keeps
// a private clone of each layer, so a shared mount can be dropped while
// overlays still use its superblock. Nothing is recorded for orphan
// cleanup: a killed runtime's detached mounts go with its descriptors.
// Unused mounts stay cached (least recently used first out, `keep_unused`
// of them), so a create/destroy loop does not remount. Where overlayfs
// refuses detached layers (before Linux 6.15) each caller gets a mount of
// its own at the directory it names, as before, and nothing is shared.
//
// Threads: Acquire/Forget/stats from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "sandbox/container/mount.h"

namespace dsec::container {

// Checks a layer list before anything is mounted: at least one entry, each
// an existing regular file, none listed twice (by device and inode: one
// shared superblock cannot be two layers of an overlay, and a second copy
// adds nothing). NotFound or InvalidArgument naming the layer.
absl::Status CheckLayerFiles(const std::vector<std::string>& layers);

// One mounted layer image, held by the sandboxes that stack it.
class LayerMount {
 public:
  // Names the layer's root for overlayfs' lowerdir= in this process.
  const std::string& lower_dir() const { return lower_dir_; }
  bool used_loop_device() const;
  // Whether this mount is the shared one (false: the caller's own).
  bool shared() const { return detached_.valid(); }

 private:
  friend class LayerMountCache;
  DetachedMount detached_;  // shared form
  Mount attached_;          // the caller's own (no sharing here)
  std::string lower_dir_;
};

struct LayerMountStats {
  bool sharing = false;    // detached shared mounts in use
  uint64_t mounts = 0;     // images mounted (shared or own)
  uint64_t hits = 0;       // acquires served by a cached shared mount
  uint64_t evictions = 0;  // unused shared mounts dropped
  size_t cached = 0;       // shared mounts held now (used or not)
};

class LayerMountCache {
 public:
  // `share` false: never share (every caller gets its own mount; for
  // comparisons). `keep_unused`: shared mounts kept while nobody uses them.
  explicit LayerMountCache(bool share = true, size_t keep_unused = 32);
  LayerMountCache(const LayerMountCache&) = delete;
  LayerMountCache& operator=(const LayerMountCache&) = delete;

  // The process-wide cache of the container tier and fncall pools
  // (DSEC_LAYER_SHARING=0 turns sharing off).
  static LayerMountCache& Default();

  // Whether Acquire shares mounts (probed on first call).
  bool sharing();

  // The mount of `image`. Shared: the cached one if the file is unchanged
  // (same device, inode, size, mtime and ctime), else a new one.
  // Not shared: `own_target` (a directory the caller owns; created if
  // missing, its parent must exist) gets a mount that goes with the last
  // reference. Errors: NotFound, InvalidArgument (not an image file or not
  // EROFS), Internal.
  absl::StatusOr<std::shared_ptr<const LayerMount>> Acquire(const std::string& image,
                                                            const std::string& own_target);
  // Drops the cached shared mounts of `image` nobody uses (after the image
  // was removed or replaced, so that its blocks can be freed).
  void Forget(const std::string& image);
  LayerMountStats stats();

 private:
  struct Key {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
    bool operator==(const Key& o) const {
      return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns &&
             ctime_ns == o.ctime_ns;
    }
  };
  struct Entry {
    Key key;
    std::string image;
    std::shared_ptr<LayerMount> mount;
  };
  bool SharingLocked();
  void TrimLocked();

  const bool share_;
  const size_t keep_unused_;
  std::mutex mu_;
  int probed_ ABSL_GUARDED_BY(mu_) = -1;            // -1 not yet, 0 no, 1 yes
  std::list<Entry> entries_ ABSL_GUARDED_BY(mu_);  // most recently used first
  LayerMountStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dsec::container
