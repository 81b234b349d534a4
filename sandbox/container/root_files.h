// SPDX-License-Identifier: Apache-2.0
// File access inside a sandbox's root directory as the host sees it. Every
// path is resolved by the kernel with openat2(RESOLVE_IN_ROOT |
// RESOLVE_NO_MAGICLINKS): ".." stops at the root and absolute symlinks are
// taken relative to it, so a sandbox cannot make the daemon read or write
// a host file by planting links.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/tier/tier.h"

namespace dsec::container {

// Errors: InvalidArgument (relative path, NUL), NotFound, ResourceExhausted
// (file larger than max_bytes), FailedPrecondition (a directory),
// Internal (syscalls).
absl::StatusOr<std::string> ReadRootFile(const std::string& root, const std::string& path,
                                         uint64_t max_bytes);
// Creates missing parent directories (0755) and the file (truncating it).
absl::Status WriteRootFile(const std::string& root, const std::string& path,
                           const std::string& data, uint32_t mode);
absl::StatusOr<std::vector<tier::FileEntry>> ListRootDir(const std::string& root,
                                                   const std::string& path);

}  // namespace dsec::container
