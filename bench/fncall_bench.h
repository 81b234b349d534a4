// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench fncall`: end-to-end latency and throughput of fncall
// calls (python `print(1)`, bash `true`), sequential and with concurrent
// callers, next to a cold `python3 -c 'print(1)'` in a container-tier
// sandbox (create + exec + destroy) and plain `python3 -c` on the host, all
// in the same run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsec::bench {

struct FncallBenchOptions {
  int calls = 1000;          // per measurement (sequential, and across all concurrent callers)
  int concurrency = 8;       // concurrent callers
  int cold_runs = 10;        // container-tier and host python3 runs
  std::vector<std::string> python_layers;  // EROFS images, lowest first
  std::vector<std::string> bash_layers;
  std::string host_python = "/usr/bin/python3";
  std::string state_root = "/run/dsec-vmm/fncall-bench";
  bool json = false;
};

// Prints the figures (text or one JSON object with python_p50_ms,
// python_p99_ms, bash_p50_ms, calls_per_s, cold_python_ms and more).
// Returns the exit status.
int RunFncallBench(const FncallBenchOptions& options);

}  // namespace dsec::bench
