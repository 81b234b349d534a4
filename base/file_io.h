// SPDX-License-Identifier: Apache-2.0
// File I/O with the path in every error: small sysfs and cgroupfs files,
// whole files, directories.
#pragma once

#include <sys/types.h>

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

// Names of the entries of a directory (no "." and ".."), sorted bytewise.
absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path);

// A whole file of any size (layer metadata, images in tests); use
// ReadSmallFile for sysfs, cgroupfs and /proc.
absl::StatusOr<std::string> ReadFile(const std::string& path);
// Creates `path` (with `mode`, less the umask) or truncates it, or appends
// to it when `append`, and writes all of `content`.
absl::Status WriteFile(const std::string& path, std::string_view content, mode_t mode = 0644,
                       bool append = false);
// mkdir -p: every missing directory of `path` (with `mode`, less the umask).
absl::Status MakeDirs(const std::string& path, mode_t mode = 0755);

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
