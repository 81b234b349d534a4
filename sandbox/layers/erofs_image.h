// SPDX-License-Identifier: Apache-2.0
// Making EROFS images (mkfs.erofs as a subprocess) and mounting them
// (file-backed mount(2)), plus the overlay mount that stacks them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dsec::layers {

struct ErofsBuildOptions {
  std::string mkfs = "mkfs.erofs";  // program, looked up in PATH
  // Filesystem UUID ("xxxxxxxx-xxxx-..."); the store derives it from the
  // layer digest so that the same tree gives the same image bytes.
  std::string uuid;
  // Build time written into the superblock. mkfs.erofs clamps every mtime
  // not older than it, so callers pass the newest mtime in the tree + 1:
  // every timestamp is kept and the image does not depend on the clock.
  int64_t build_time = 0;
};

// Builds an uncompressed EROFS image of `src_dir` at `image_path` (which must
// not exist) keeping owners, modes, device nodes, xattrs, hard links and
// mtimes. Uncompressed, so that pmem-dax can map the image with DAX. Returns
// the bytes mkfs.erofs wrote to storage (wait4 accounting).
absl::StatusOr<uint64_t> BuildErofsImage(const std::string& src_dir, const std::string& image_path,
                                         const ErofsBuildOptions& options);

// OK if `image_path` is a regular file that starts with an EROFS superblock
// (magic 0xE0F5E1E2 at offset 1024); InvalidArgument otherwise.
absl::Status CheckErofsImage(const std::string& image_path);

// A mount this process made; unmounted (lazily, MNT_DETACH) on destruction.
// Move-only. Used by one thread; lives as long as its owner needs the tree.
class ScopedMount {
 public:
  ScopedMount() = default;
  explicit ScopedMount(std::string target) : target_(std::move(target)) {}
  ~ScopedMount();
  ScopedMount(ScopedMount&& other) noexcept : target_(std::move(other.target_)) {
    other.target_.clear();
  }
  ScopedMount& operator=(ScopedMount&& other) noexcept;
  ScopedMount(const ScopedMount&) = delete;
  ScopedMount& operator=(const ScopedMount&) = delete;

  const std::string& target() const { return target_; }
  // Unmounts now and reports failure (the destructor cannot).
  absl::Status Unmount();

 private:
  std::string target_;
};

// Mounts the EROFS image file read-only at `target` with the file-backed form
// of mount(2) (Linux 6.12+: the source is a regular file). Unavailable when
// the kernel lacks EROFS or file-backed mounts (ENODEV/ENOTBLK).
absl::StatusOr<ScopedMount> MountErofsFile(const std::string& image_path, const std::string& target);

// Mounts overlayfs at `target`. `lowers` are top first (overlayfs order).
// Without `upper` the overlay is read-only. redirect_dir and metacopy are
// off so that the upper directory stays something pack_diff can capture.
absl::StatusOr<ScopedMount> MountOverlay(const std::vector<std::string>& lowers,
                                         const std::string& upper, const std::string& work,
                                         const std::string& target);

}  // namespace dsec::layers
