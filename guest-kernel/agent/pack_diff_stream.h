// SPDX-License-Identifier: Apache-2.0
// The pack_diff stream: the agent walks its overlay upper directory and sends
// every entry (DIFF_ENTRY, then the data of regular files as DATA frames) and
// a DIFF_END; the host rebuilds the tree exactly with MaterializeDiff. The
// result is an upper directory in overlayfs form (whiteouts as 0:0 character
// devices, opaque directories by their xattr), ready for
// sandbox/layers' StageDiff/PackDiff.
//
// Order: pre-order, entries of a directory by name, so a parent always comes
// before its children. "." (the upper directory itself) comes first. A
// non-directory inode with several names is sent in full once; later names
// are `hardlink` entries pointing at the first.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "guest-kernel/agent/messages.h"
#include "guest-kernel/agent/protocol.h"

namespace dsec::agent {

// Where the materialiser takes frames from (the client's connection with its
// deadlines, or a recorded list in tests).
class FrameSource {
 public:
  virtual ~FrameSource() = default;
  virtual absl::StatusOr<Frame> NextFrame() = 0;
};

// Where the walker sends frames.
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  virtual absl::Status SendFrame(const Frame& frame) = 0;
};

struct DiffStats {
  uint64_t entries = 0;
  uint64_t data_bytes = 0;
  uint64_t hardlinks = 0;
  uint64_t whiteouts = 0;
};

// Agent side: streams `upper` (a directory path; "/proc/self/fd/N" works)
// to `sink`, ending with DIFF_END. The upper directory should be quiescent;
// a file that shrinks meanwhile is padded with zeros to its announced size.
absl::StatusOr<DiffStats> SendDiff(const std::string& upper, FrameSink& sink);

struct MaterializeOptions {
  uint64_t max_entries = 1'000'000;
  uint64_t max_data_bytes = 64ull << 30;
  size_t max_xattrs_per_entry = 256;
  // Character and block devices other than whiteouts. Off by default: a
  // guest could otherwise plant a node for a host disk in the tree.
  bool allow_device_nodes = false;
};

// Host side: reads DIFF_ENTRY/DATA frames up to DIFF_END from `source` and
// recreates the tree under `dest_dir` (an existing, empty directory): type,
// mode incl. set-id and sticky bits, owner, xattrs, mtime/atime (of
// directories too, applied last), symlink targets and hard links. Must run
// as root for chown, mknod and trusted.* xattrs.
//
// The stream is guest-controlled and treated as hostile: paths must be
// relative and normalised (no "", ".", ".." components), parents must be
// directories created earlier by the stream, every creation goes through the
// parent's descriptor (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), no
// name is created twice, hard links may only point at earlier non-directory
// entries, and the options' limits hold. An ERROR frame ends the stream with
// the agent's status. On failure `dest_dir` holds a partial tree; the caller
// removes it.
absl::StatusOr<DiffStats> MaterializeDiff(FrameSource& source, const std::string& dest_dir,
                                          const MaterializeOptions& options = {});

}  // namespace dsec::agent
