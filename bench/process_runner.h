// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::bench {

// One finished child process as a benchmark sees it.
struct ProcessResult {
  int64_t spawn_ns = 0;   // CLOCK_MONOTONIC just before posix_spawn
  int64_t exit_ns = 0;    // CLOCK_MONOTONIC when wait4 returned
  int wait_status = 0;    // as from wait4
  uint64_t peak_rss_kib = 0;  // ru_maxrss
  double WallMs() const { return static_cast<double>(exit_ns - spawn_ns) / 1e6; }
  bool ExitedWith(int code) const;
};

// Runs `jobs` (argv vectors) with at most `concurrency` alive at once, with
// stdin, stdout and stderr on /dev/null, and returns one result per job in
// job order. Children are reaped by pid, so other children of the caller are
// not disturbed; on error every child already started is killed and reaped.
absl::StatusOr<std::vector<ProcessResult>> RunProcesses(
    const std::vector<std::vector<std::string>>& jobs, int concurrency);

// Nearest-rank percentile (p in [0, 100]) of `values`; 0 for an empty list.
double Percentile(std::vector<double> values, double p);

}  // namespace dsec::bench
