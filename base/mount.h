// SPDX-License-Identifier: Apache-2.0
// The one owner of a mount this process attached somewhere (EROFS layers,
// tmpfs, overlayfs, idmapped copies, test mounts): detached (MNT_DETACH)
// when the owner goes. Used by the layer store (sandbox/layers), the
// container and fncall tiers (sandbox/container: also fd-only mounts,
// DetachedMount), the benchmarks and tests. Plus mountinfo parsing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/scoped_fd.h"

namespace dsec {

// One mount this process made, unmounted (MNT_DETACH) on destruction.
// Move-only. A loop device made for a fallback EROFS mount is set to
// autoclear, so it detaches itself with its last mount.
// Threads: one owner thread; lives as long as its owner needs the tree.
class Mount {
 public:
  Mount() = default;
  Mount(Mount&& other) noexcept;
  Mount& operator=(Mount&& other) noexcept;
  Mount(const Mount&) = delete;
  Mount& operator=(const Mount&) = delete;
  ~Mount();

  // Takes over a mount already attached at `target` (one a caller made
  // with its own mount(2) call or a tool).
  static Mount Adopt(std::string target) { return Mount(std::move(target), false); }
  // mount(2) wrapper; errors name the target and errno.
  static absl::StatusOr<Mount> Create(const std::string& source, const std::string& target,
                                      const std::string& fstype, unsigned long flags,
                                      const std::string& data);
  // An EROFS image file read-only (nodev, nosuid) at `target`: the
  // file-backed form of mount(2) first, a loop device (autoclear) only
  // where the kernel lacks it.
  static absl::StatusOr<Mount> Erofs(const std::string& image, const std::string& target);
  // tmpfs limited to `size_bytes` (mode 0755, nodev, nosuid).
  static absl::StatusOr<Mount> Tmpfs(const std::string& target, uint64_t size_bytes);
  // overlayfs at `target` (nodev); `lowers` lowest first (reversed for
  // lowerdir=); index and xino off.
  static absl::StatusOr<Mount> Overlay(const std::vector<std::string>& lowers,
                                       const std::string& upper, const std::string& work,
                                       const std::string& target);
  // An idmapped copy of the mount at `source` (a path, /proc/self/fd/N of
  // a detached mount included) attached at `target`: files owned by id N
  // on disk appear as the id `userns_fd`'s namespace maps N to, and new
  // files are stored with the inverse (mount_setattr(2) MOUNT_ATTR_IDMAP).
  // The source's superblock, and so its page cache, is shared.
  static absl::StatusOr<Mount> Idmapped(const std::string& source, int userns_fd,
                                        const std::string& target);
  // The data string Overlay() would pass for these layers.
  static absl::StatusOr<std::string> OverlayData(const std::vector<std::string>& lowers,
                                                 const std::string& upper,
                                                 const std::string& work);

  // Unmounts now (MNT_DETACH; one already gone is fine), reporting failure
  // (the destructor logs it instead).
  absl::Status Unmount();

  const std::string& target() const { return target_; }
  bool used_loop_device() const { return loop_; }

 private:
  Mount(std::string target, bool loop) : target_(std::move(target)), loop_(loop) {}

  std::string target_;  // "" once unmounted or moved from
  bool loop_ = false;
};

// overlayfs's lowerdir= for `lowers` (lowest first): named top first and
// ':'-joined. InvalidArgument without a lower or for a path with ',' or ':'.
absl::StatusOr<std::string> OverlayLowerDir(const std::vector<std::string>& lowers);

// Attaches `image` read-only to a free loop device with autoclear set:
// the open device and its path. The caller mounts it, then closes the fd
// (the device detaches when its last mount goes), or clears it with
// LOOP_CLR_FD when the mount fails.
absl::StatusOr<std::pair<ScopedFd, std::string>> AttachLoopDevice(const std::string& image);

// Mount points listed in mountinfo text (field 5, unescaped), in file order.
std::vector<std::string> ParseMountPoints(std::string_view mountinfo);
// The mount points at or below `dir` in this process's mount table.
absl::StatusOr<std::vector<std::string>> MountPointsBelow(const std::string& dir);

// Detaches every mount at or below `dir` (deepest first), for orphan
// cleanup. Returns how many were unmounted.
absl::StatusOr<int> UnmountBelow(const std::string& dir);

}  // namespace dsec
