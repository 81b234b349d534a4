// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench api`: create + exec + delete through the Python SDK
// (libdsec) per tier, against a private daemon.
#pragma once

#include <string>

namespace dsec::bench {

struct ApiBenchOptions {
  bool json = false;
  int iterations = 50;
  double rate_seconds = 5.0;
  int concurrency = 4;
  std::string script;  // api_bench.py; "" = $DSEC_API_BENCH_SCRIPT or the checkout's
};

// Runs sdk/python/bench/api_bench.py (the measurement, through libdsec)
// against a private node daemon (daemon_script.h: temp state, stopped and
// checked for mounts left afterwards). The figures are the script's output
// (--json passed through). Returns the exit status: the script's, 2 when
// the daemon, the script or python3 is missing, 130 when interrupted.
int RunApiBench(const ApiBenchOptions& options);

}  // namespace dsec::bench
