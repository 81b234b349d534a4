// SPDX-License-Identifier: Apache-2.0
// Host-side mounts of a container sandbox: read-only EROFS layers, the
// size-limited tmpfs upper and the overlay that joins them. Attached ones
// are owned by a Mount (base/mount.h), those attached nowhere by a
// DetachedMount; each goes with its owner.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/mount.h"
#include "base/scoped_fd.h"

namespace dsec::container {

// Mounts attached somewhere are base/mount.h's Mount; the tier's code (and
// the fncall tier's) names it container::Mount.
using ::dsec::Mount;

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
  // An empty tmpfs of `size_bytes` (read-only when `read_only`), with the
  // `extra` mount options (an empty value sets a flag: {"noswap", ""}).
  static absl::StatusOr<DetachedMount> Tmpfs(
      uint64_t size_bytes, bool read_only, const std::vector<std::pair<std::string, std::string>>& extra = {});
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
// older kernels want every layer, the upper too, in the caller's mount
// namespace): probed once per process with two detached tmpfs lowers,
// nothing attached. Sandboxes take a detached upper on the same answer.
bool OverlayAcceptsDetachedLayers();

// A new detached clone (open_tree(2)) of this process's one read-only
// sysfs for sandboxes, mounted once from a network namespace of its own
// (kept, empty but for lo): what a sandbox's init attaches at /sys instead
// of mounting a sysfs of its own. A sysfs mount in a new network namespace
// is a new superblock, and making one compares against every sysfs
// superblock on the node (kernfs_test_super), so that each create cost
// more with every sandbox alive. Sandboxes see the node's devices as before,
// and under /sys/class/net that namespace's lo instead of their own
// interfaces (ip and the rest read netlink). Unavailable with the reason
// when the kernel refuses (probed once).
absl::StatusOr<ScopedFd> CloneSharedSysfs();

}  // namespace dsec::container
