// SPDX-License-Identifier: Apache-2.0
#include "bench/process_runner.h"

#include <poll.h>

#include <cerrno>
#include <map>

#include "base/status.h"

namespace dsec::bench {

absl::StatusOr<std::vector<ProcessResult>> RunProcesses(
    const std::vector<std::vector<std::string>>& jobs, int concurrency) {
  if (concurrency < 1) return absl::InvalidArgumentError("concurrency must be at least 1");
  std::vector<ProcessResult> results(jobs.size());
  // Job index -> its child; an early return kills and reaps them all.
  std::map<size_t, Subprocess> running;
  size_t next = 0;
  while (next < jobs.size() || !running.empty()) {
    while (next < jobs.size() && static_cast<int>(running.size()) < concurrency) {
      SpawnOptions spawn;  // stdin, stdout and stderr on /dev/null
      spawn.argv = jobs[next];
      DSEC_ASSIGN_OR_RETURN(Subprocess child, Subprocess::Spawn(spawn));
      running.emplace(next++, std::move(child));
    }
    // Reap whichever of ours finishes first: each pidfd turns readable when
    // its child exits.
    std::vector<pollfd> fds;
    std::vector<size_t> index;
    for (auto& [i, child] : running) {
      fds.push_back({child.pidfd(), POLLIN, 0});
      index.push_back(i);
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("poll");
    }
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      DSEC_ASSIGN_OR_RETURN(results[index[k]], running.at(index[k]).Wait());
      running.erase(index[k]);
    }
  }
  return results;
}

}  // namespace dsec::bench
