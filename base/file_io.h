// SPDX-License-Identifier: Apache-2.0
// Small-file I/O for sysfs and cgroupfs, with the path in every error.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec {

// Reads a whole small file (sysfs and cgroupfs files are at most a page or
// two; the cap stops a wrong path from reading something huge).
// Errors carry the errno's status code (ENOENT -> NotFound) and the path.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path);

// Writes `value` with one write(2), as cgroupfs requires (each write is one
// command). Errors carry the errno's status code and the path.
absl::Status WriteSmallFile(const std::string& path, std::string_view value);
// The same, returning 0 or the errno, for callers that treat some errnos as
// success (ESRCH when moving a task that just exited).
int WriteSmallFileErrno(const std::string& path, std::string_view value);

// Parses a whole integer file ("12\n"); InvalidArgument naming `path`.
absl::StatusOr<long long> ParseIntFile(const std::string& path, std::string_view text);

// Names of the entries of a directory (no "." and ".."), sorted.
absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path);

bool PathExists(const std::string& path);

// The last `max_bytes` of a file ("" if unreadable): log and console tails
// in error messages.
std::string FileTail(const std::string& path, size_t max_bytes);

// This executable (/proc/self/exe), "" if unreadable.
std::string SelfExePath();
// `name` in this executable's directory (a sibling binary such as
// dsec-monitor next to dsec-vmm), whether or not it exists.
std::string PathBesideSelf(const std::string& name);

}  // namespace dsec
