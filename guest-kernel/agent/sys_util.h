// SPDX-License-Identifier: Apache-2.0
// Small syscall wrappers shared by the agent's file code (server file ops,
// pack_diff walker and materialiser).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/scoped_fd.h"

namespace dsec::agent {

// openat2(2) with `resolve` (RESOLVE_* flags); O_CLOEXEC is always added.
// Retries the EAGAIN that RESOLVE_IN_ROOT/BENEATH return when a rename or
// mount raced with the lookup. Unavailable if the kernel lacks openat2.
absl::StatusOr<ScopedFd> OpenAt2(int dirfd, const std::string& path, uint64_t flags, mode_t mode,
                                 uint64_t resolve);

// "/proc/self/fd/<fd>" (+ "/" + name when name is not empty): a path that
// reaches an entry through an already-resolved directory descriptor.
std::string FdPath(int fd, std::string_view name = {});

// The xattrs of `path` (not following a final symlink), name -> value in
// listing order. Filesystems without xattr support give an empty list.
struct XattrPair {
  std::string name;
  std::string value;
};
absl::StatusOr<std::vector<XattrPair>> ListXattrs(const std::string& path);

// Writes all of `data` to a blocking descriptor.
absl::Status WriteAll(int fd, std::string_view data);

}  // namespace dsec::agent
