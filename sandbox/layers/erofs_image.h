// SPDX-License-Identifier: Apache-2.0
// Making EROFS images (mkfs.erofs as a subprocess) and mounting them
// (file-backed mount(2)), plus the overlay mount that stacks them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/erofs_superblock.h"
#include "base/mount.h"

namespace dsec::layers {

// Data compression of a layer image: "none" (the default), or a mkfs.erofs
// compressor with an optional level, "ALG" or "ALG,LEVEL" (e.g. "lz4hc" or
// "lz4hc,12"; which algorithms exist depends on the erofs-utils build:
// AvailableErofsCompressors). Only uncompressed images can be mapped with
// DAX (pmem-dax: the guest kernel reads compressed files through its own
// page cache), so compression is for the container tier, where the host
// page cache holds the decompressed pages once for every sandbox.
inline constexpr char kNoCompression[] = "none";

// Syntax check only (no mkfs): "none", or ALG ([a-z0-9]{1,16}) optionally
// followed by ",LEVEL" (1-2 digits). InvalidArgument naming the spec.
absl::Status ValidateCompressionSpec(const std::string& spec);
// True unless `spec` is empty or "none".
bool IsCompressed(const std::string& spec);
// The algorithm of a valid spec ("lz4hc" for "lz4hc,12").
std::string CompressionAlgorithm(const std::string& spec);

// The compressors `mkfs` offers (its --help ends with "Available compressors
// are: lz4hc, lz4"), in its order (mkfs.erofs lists the strongest first).
// Unavailable when mkfs cannot be run or lists none.
absl::StatusOr<std::vector<std::string>> AvailableErofsCompressors(const std::string& mkfs = "mkfs.erofs");

// ValidateCompressionSpec, then InvalidArgument (listing what is available)
// when the algorithm is not one `mkfs` offers. "none" needs no mkfs call.
absl::Status CheckCompressionAvailable(const std::string& spec, const std::string& mkfs = "mkfs.erofs");

struct ErofsBuildOptions {
  std::string mkfs = "mkfs.erofs";  // program, looked up in PATH
  // Filesystem UUID ("xxxxxxxx-xxxx-..."); the store derives it from the
  // layer digest so that the same tree gives the same image bytes.
  std::string uuid;
  // Build time written into the superblock. mkfs.erofs clamps every mtime
  // not older than it, so callers pass the newest mtime in the tree + 1:
  // every timestamp is kept and the image does not depend on the clock.
  int64_t build_time = 0;
  // kNoCompression (DAX-capable) or a compression spec (see above).
  std::string compression = kNoCompression;
};

// Builds an EROFS image of `src_dir` at `image_path` (which must not exist)
// keeping owners, modes, device nodes, xattrs, hard links and mtimes.
// Uncompressed unless options.compression says otherwise (uncompressed is
// what pmem-dax can map with DAX). A compressor this mkfs.erofs lacks is
// InvalidArgument. Returns the bytes mkfs.erofs wrote to storage (wait4
// accounting).
absl::StatusOr<uint64_t> BuildErofsImage(const std::string& src_dir, const std::string& image_path,
                                         const ErofsBuildOptions& options);

// OK if `image_path` is a file that starts with an EROFS superblock
// (base/erofs_superblock.h, which also tells whether it is compressed);
// InvalidArgument otherwise.
absl::Status CheckErofsImage(const std::string& image_path);

// Mounts the EROFS image file read-only at `target` (owned by the returned
// Mount, base/mount.h) with the file-backed form of mount(2) (Linux 6.12+: the source is a regular file). Unavailable when
// the kernel lacks EROFS or file-backed mounts (ENODEV/ENOTBLK).
absl::StatusOr<Mount> MountErofsFile(const std::string& image_path, const std::string& target);

// Mounts overlayfs at `target`. `lowers` are top first (overlayfs order).
// Without `upper` the overlay is read-only. redirect_dir and metacopy are
// off so that the upper directory stays something pack_diff can capture.
absl::StatusOr<Mount> MountOverlay(const std::vector<std::string>& lowers, const std::string& upper,
                                   const std::string& work, const std::string& target);

}  // namespace dsec::layers
