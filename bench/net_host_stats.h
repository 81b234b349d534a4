// SPDX-License-Identifier: Apache-2.0
// Host figures `bench net` reads around its steps: /proc/meminfo's
// MemAvailable, slab and per-CPU memory, the BPF memory behind this
// process's descriptors (fdinfo "memlock" of its programs and maps), its
// descriptor count and RSS; and the descriptor limit it may need to raise
// (each networked sandbox holds a dozen BPF descriptors in the process
// that made it).
//
// Threads: any.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dsec::bench::net {

struct HostStats {
  int64_t mem_available_kib = 0;
  int64_t slab_kib = 0;        // Slab (reclaimable + not)
  int64_t sunreclaim_kib = 0;  // SUnreclaim
  int64_t percpu_kib = 0;      // Percpu
  int64_t bpf_memlock_bytes = 0;
  int64_t bpf_fds = 0;  // programs, maps and links
  int64_t fds = 0;
  int64_t rss_kib = 0;  // this process's VmRSS
};

absl::StatusOr<HostStats> ReadHostStats();

// Raises RLIMIT_NOFILE (the soft limit, and the hard one where the
// process may: CAP_SYS_RESOURCE) so that `needed` descriptors fit.
// ResourceExhausted naming the limits when they cannot.
absl::Status EnsureFdLimit(int64_t needed);

}  // namespace dsec::bench::net
