// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/subprocess.h"

namespace dsec::bench {

// One finished child process as a benchmark sees it: spawn_ns just before
// the spawn, exit_ns when it was reaped, wait_status, peak_rss_kib
// (ru_maxrss), WallMs(), ExitedWith(code).
using ProcessResult = SubprocessResult;

// Runs `jobs` (argv vectors) with at most `concurrency` alive at once, with
// stdin, stdout and stderr on /dev/null, and returns one result per job in
// job order. Children are reaped by pid, so other children of the caller are
// not disturbed; on error every child already started is killed and reaped.
absl::StatusOr<std::vector<ProcessResult>> RunProcesses(
    const std::vector<std::vector<std::string>>& jobs, int concurrency);

}  // namespace dsec::bench
