// SPDX-License-Identifier: Apache-2.0
// The writable layers of container sandboxes as directories of one tmpfs
// per process instead of a tmpfs each.
//
// Why: every file system a sandbox has is a superblock, and every
// superblock is a memory-cgroup-aware shrinker whose state the kernel keeps
// in every memory cgroup (1 KiB per 64 superblocks on the node, in each
// cgroup), with two memory-cgroup-aware LRU lists that each cgroup's
// removal walks: a node's memory and each delete grow with sandboxes x
// superblocks (docs/benchmarks.md, bench density). A tmpfs of its own was
// also mounted at each create and unmounted at each delete, and the
// unmount waits for an expedited RCU grace period. A directory costs none
// of that.
//
// The bound: a directory has no size of its own. The sandbox's memory
// cgroup bounds it instead: tmpfs pages and inodes are charged to the
// memory cgroup of the process that writes them, and the store is mounted
// `noswap`, so that they cannot leave for swap. Sandbox uses the store only
// where that bound is at least as tight as the size asked for (a memory
// limit no larger than the writable layer's size); otherwise a tmpfs of its
// own. What differs, as the sandbox sees it: statfs on its root shows the
// store's size (the host's RAM) and the store's free space, which moves
// with what other sandboxes write; a write past the bound fails as a
// memory-cgroup charge (ENOMEM or the cgroup's OOM kill) rather than
// ENOSPC. Files written into the sandbox through the daemon's files API
// are charged to the daemon, as before, and bounded only by the store.
//
// The store is a detached mount (mount.h): no mount in any table, one
// descriptor for the process, gone with it.
// Threads: any.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sandbox/container/mount.h"

namespace dsec::container {

class UpperStore {
 public:
  // A store of `size_bytes` (tmpfs, noswap, no inode limit: inodes are
  // charged to the writer's memory cgroup, and a count shared by all
  // sandboxes would let one exhaust it for the rest).
  static absl::StatusOr<std::unique_ptr<UpperStore>> Create(uint64_t size_bytes);
  // The process's store, made on first use as large as the host's RAM;
  // null (the reason logged once) where the kernel refuses one, or where
  // overlayfs takes no upper on a detached mount (before Linux 6.15).
  static UpperStore* Default();

  // A new, empty directory (0755) for sandbox `id`; returns its name in
  // the store, unique for the process's life (a destroyed sandbox's
  // directory may outlive the id's reuse).
  absl::StatusOr<std::string> Make(const std::string& id);
  // Where this process reaches a name: /proc/self/fd/<store>/<name>.
  std::string PathOf(const std::string& name) const;
  // Removes a name and everything under it; OK when absent. Only once no
  // process can write there (the sandbox's processes are gone).
  absl::Status Remove(const std::string& name);
  // How many directories it holds now.
  int64_t held() const { return held_.load(std::memory_order_relaxed); }
  // The store's device (st_dev), for tests and diagnostics.
  uint64_t device() const { return device_; }

 private:
  UpperStore(DetachedMount mount, uint64_t device) : mount_(std::move(mount)), device_(device) {}
  DetachedMount mount_;
  uint64_t device_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<int64_t> held_{0};
};

}  // namespace dsec::container
