// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"

namespace dsec {

// What UnmapImageReadOnlyPages did.
struct ImagePagesReleased {
  size_t bytes = 0;  // length of the read-only ranges given to MADV_DONTNEED
  int ranges = 0;    // how many (page-aligned, never touching a writable page)
};

// Drops this process's page-table mappings of its own executable's
// read-only segments (text, rodata, headers: the PT_LOAD segments without
// PF_W) with MADV_DONTNEED. Those pages are the file's page cache, never
// written through this mapping, so nothing is lost: code and constants the
// process uses afterwards fault back in from the page cache (minor faults).
// What start-up alone touched (flag parsing, device set-up, the seccomp
// compiler) stops counting in the process's RSS and, no longer mapped,
// becomes page cache the kernel may reclaim — the user-space analogue of the
// kernel freeing its __init text. Pages of a writable segment (data, bss,
// RELRO) are never included, not even a page a read-only segment shares
// with one. Shared libraries are left alone.
absl::StatusOr<ImagePagesReleased> UnmapImageReadOnlyPages();

}  // namespace dsec
