// SPDX-License-Identifier: Apache-2.0
#include "bench/process_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/status.h"

extern char** environ;

namespace dsec::bench {

namespace {
}  // namespace

bool ProcessResult::ExitedWith(int code) const {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == code;
}

absl::StatusOr<std::vector<ProcessResult>> RunProcesses(
    const std::vector<std::vector<std::string>>& jobs, int concurrency) {
  if (concurrency < 1) return absl::InvalidArgumentError("concurrency must be at least 1");
  std::vector<ProcessResult> results(jobs.size());
  std::map<pid_t, size_t> running;  // pid -> job index
  auto kill_all = [&] {
    for (auto& [pid, idx] : running) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    running.clear();
  };

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);

  size_t next = 0;
  absl::Status error;
  while ((next < jobs.size() || !running.empty()) && error.ok()) {
    while (next < jobs.size() && static_cast<int>(running.size()) < concurrency) {
      std::vector<char*> argv;
      for (const auto& a : jobs[next]) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      pid_t pid = 0;
      results[next].spawn_ns = MonotonicNowNs();
      int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
      if (rc != 0) {
        error = ErrnoToStatus(absl::StrCat("posix_spawn ", jobs[next][0]), rc);
        break;
      }
      running[pid] = next++;
    }
    if (!error.ok()) break;
    // Reap whichever of ours finishes first.
    bool reaped = false;
    while (!reaped) {
      for (auto it = running.begin(); it != running.end(); ++it) {
        int status = 0;
        rusage ru{};
        pid_t r = ::wait4(it->first, &status, running.size() == 1 ? 0 : WNOHANG, &ru);
        if (r == it->first) {
          ProcessResult& res = results[it->second];
          res.exit_ns = MonotonicNowNs();
          res.wait_status = status;
          res.peak_rss_kib = static_cast<uint64_t>(ru.ru_maxrss);
          running.erase(it);
          reaped = true;
          break;
        }
      }
      if (!reaped) {
        // Several children alive: block until any child changes state
        // without reaping it, then look again.
        siginfo_t info{};
        if (::waitid(P_ALL, 0, &info, WEXITED | WNOWAIT) != 0 && errno != EINTR) {
          error = ErrnoStatus("waitid");
          break;
        }
      }
    }
  }
  posix_spawn_file_actions_destroy(&actions);
  if (!error.ok()) {
    kill_all();
    return error;
  }
  return results;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  double rank = std::ceil(p / 100.0 * static_cast<double>(values.size()));
  size_t idx = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return values[std::min(idx, values.size() - 1)];
}

}  // namespace dsec::bench
