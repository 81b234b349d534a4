// SPDX-License-Identifier: Apache-2.0
// Host-side mounts of a container sandbox: read-only EROFS layers, the
// size-limited tmpfs upper and the overlay that joins them. Each is owned by
// a Mount that detaches it on destruction.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/scoped_fd.h"

namespace dsec::container {

// One mount this process made, unmounted (MNT_DETACH) on destruction.
// Move-only. A loop device made for a fallback EROFS mount is set to
// autoclear, so it detaches itself with its last mount.
// Threads: one owner thread.
class Mount {
 public:
  Mount() = default;
  Mount(Mount&& other) noexcept;
  Mount& operator=(Mount&& other) noexcept;
  Mount(const Mount&) = delete;
  Mount& operator=(const Mount&) = delete;
  ~Mount();

  // mount(2) wrapper; errors name the target and errno.
  static absl::StatusOr<Mount> Create(const std::string& source, const std::string& target,
                                      const std::string& fstype, unsigned long flags,
                                      const std::string& data);
  // An EROFS image file read-only at `target`: the file-backed form of
  // mount(2) first, a loop device (autoclear) only where the kernel lacks it.
  static absl::StatusOr<Mount> Erofs(const std::string& image, const std::string& target);
  // tmpfs limited to `size_bytes` (mode 0755).
  static absl::StatusOr<Mount> Tmpfs(const std::string& target, uint64_t size_bytes);
  // overlayfs at `target`; `lowers` lowest first (reversed for lowerdir=).
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

  // Unmounts now, reporting failure (the destructor logs it instead).
  absl::Status Unmount();

  const std::string& target() const { return target_; }
  bool used_loop_device() const { return loop_; }

 private:
  Mount(std::string target, bool loop) : target_(std::move(target)), loop_(loop) {}

  std::string target_;  // "" once unmounted or moved from
  bool loop_ = false;
};

// A mount attached nowhere (fsmount(2)): it is reached only through its
// descriptor, shows in no mount table, and is gone once the descriptor is
// closed and no mount cloned from it (an overlay's private copy of a layer)
// remains, so a killed runtime leaves nothing of it behind. Move-only.
// Threads: any; the descriptor is close-on-exec.
class DetachedMount {
 public:
  DetachedMount() = default;
  // An EROFS image read-only (nodev, nosuid): the file itself as source
  // (Linux 6.12+), else a loop device set to autoclear. Errors name the
  // image: NotFound, InvalidArgument (not an EROFS image), Internal.
  static absl::StatusOr<DetachedMount> Erofs(const std::string& image);
  // An empty tmpfs of `size_bytes` (read-only when `read_only`).
  static absl::StatusOr<DetachedMount> Tmpfs(uint64_t size_bytes, bool read_only);
  // overlayfs of `lowers` (lowest first; paths, /proc/self/fd/N of
  // detached layers included), `upper` and `work`, nodev: what a sandbox's
  // init attaches in its own mount namespace (the host's has no copy).
  static absl::StatusOr<DetachedMount> Overlay(const std::vector<std::string>& lowers,
                                               const std::string& upper, const std::string& work);

  bool valid() const { return fd_.valid(); }
  int fd() const { return fd_.get(); }
  void Reset() { fd_.Reset(); }
  // "/proc/self/fd/N": names the mount's root in this process (for
  // overlayfs' lowerdir=, which resolves it when the overlay is mounted).
  std::string path() const;
  bool used_loop_device() const { return loop_; }

 private:
  DetachedMount(ScopedFd fd, bool loop) : fd_(std::move(fd)), loop_(loop) {}
  ScopedFd fd_;
  bool loop_ = false;
};

// Whether overlayfs accepts layers on detached mounts here (Linux 6.15+;
// older kernels want every layer in the caller's mount namespace): probed
// once per process with two detached tmpfs lowers, nothing attached.
bool OverlayAcceptsDetachedLayers();

// Mount points listed in mountinfo text (field 5, unescaped), in file order.
std::vector<std::string> ParseMountPoints(std::string_view mountinfo);

// Detaches every mount at or below `dir` (deepest first), for orphan
// cleanup. Returns how many were unmounted.
absl::StatusOr<int> UnmountBelow(const std::string& dir);

}  // namespace dsec::container
