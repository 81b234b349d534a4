// SPDX-License-Identifier: Apache-2.0
// A process's memory as /proc/<pid>/status reports it (VmRSS and its parts,
// VmSwap). Read by `vm run`'s control socket (this process) and by `bench
// reclaim` (its monitor children).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace dsec::balloon {

struct ProcessMemory {
  uint64_t vm_rss = 0;     // = rss_anon + rss_file + rss_shmem
  uint64_t rss_anon = 0;
  uint64_t rss_file = 0;
  uint64_t rss_shmem = 0;  // mapped shared memory (the guest-RAM memfd)
  uint64_t vm_swap = 0;    // anonymous memory in swap (shmem in swap is not here)
};

// Parses the text of a status file (fields in kB). InvalidArgument if VmRSS
// is missing (a kernel thread or a zombie has none).
absl::StatusOr<ProcessMemory> ParseProcStatusMemory(std::string_view text);
// NotFound once the process is gone.
absl::StatusOr<ProcessMemory> ReadProcessMemory(pid_t pid);

}  // namespace dsec::balloon
