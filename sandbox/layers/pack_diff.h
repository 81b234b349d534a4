// SPDX-License-Identifier: Apache-2.0
// pack_diff: turns an overlayfs upper directory (what a sandbox changed) into
// a new EROFS layer that, stacked over the same lower layers, reproduces the
// sandbox's merged view.
//
// overlayfs marks deletions with whiteouts (character device 0/0, or a
// zero-size file with the "whiteout" xattr) and replaced directories with the
// "opaque" xattr. A lower layer of an overlay mount is read with the same
// conventions, and EROFS keeps device nodes and xattrs, so the layer keeps
// whiteouts as 0/0 devices and opaque markers as xattrs, rewritten to the
// xattr namespace the consuming overlay reads (trusted.overlay., or
// user.overlay. for a userxattr mount). overlayfs' bookkeeping xattrs
// (origin, impure, nlink, upper, uuid) are dropped: they point at inodes of
// the old mount. Upper directories made with redirect_dir or metacopy are
// refused: their contents live partly in the lower layers (mount the sandbox
// overlay with redirect_dir=off,metacopy=off, as MountOverlay does).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sandbox/layers/diff_scan.h"
#include "sandbox/layers/layer_store.h"

namespace dsec::layers {

struct PackDiffOptions {
  // Namespace of overlayfs' own xattrs in the upper directory:
  // "trusted.overlay." or, for an overlay mounted with userxattr,
  // "user.overlay.".
  std::string upper_xattr_prefix = "trusted.overlay.";
  // Namespace the layer is written with, for the overlay that will stack it.
  std::string lower_xattr_prefix = "trusted.overlay.";
  // PackDiff only. Depth, path length and entries of the upper, checked
  // before anything is copied (diff_scan.h); the path limit is lowered
  // further so that no full path PackDiff or mkfs.erofs makes exceeds
  // PATH_MAX.
  DiffLimits limits;
  // The layer's size at most (0: no limit): the scan's estimate before the
  // copy, the image itself before it is committed. ResourceExhausted.
  uint64_t max_layer_bytes = 0;
  // Bytes the store's file system keeps free: the pack is refused
  // (ResourceExhausted) unless the staged copy and the image fit beside
  // them.
  uint64_t reserve_free_bytes = 0;
};

// Copies `upper` to `staging` (which must not exist; its parent must) in
// layer form: every entry with its type, mode, owner, xattrs (translated as
// above), mtime/atime, symlink target and hard-link structure. Must run as
// root (mknod of whiteouts, chown, trusted.* xattrs). The upper directory
// should not change meanwhile (the sandbox is stopped or frozen).
absl::Status StageDiff(const std::string& upper, const std::string& staging,
                       const PackDiffOptions& options = {});

// Files keep their holes: a sparse file's copy holds only its data blocks.
//
// ScanDiff of `upper` against the options' limits and the store's free
// space, then StageDiff into the store's tmp directory, then
// LayerStore::Build of the staged tree with `request` (whose parents should
// be the sandbox's lower layers, bottom first), then removal of the staged
// copy. A refused or failed pack leaves nothing in the store. Errors:
// InvalidArgument (limits of shape, bad compression), ResourceExhausted
// (size, free space), those of Build; messages about the tree name paths
// inside it, never the upper's host path.
absl::StatusOr<BuildResult> PackDiff(LayerStore& store, const std::string& upper,
                                     BuildRequest request, const PackDiffOptions& options = {});

}  // namespace dsec::layers
