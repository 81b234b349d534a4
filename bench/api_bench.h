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

// Starts a private node daemon (the dsec-vmmd beside this binary) on a temp
// socket with temp state, trajectory and layer-store directories, runs
// sdk/python/bench/api_bench.py (the measurement, through libdsec) with
// /usr/bin/python3, then stops the daemon (SIGTERM, SIGKILL after 60 s) and
// removes the temp directory; a mount left under it is an error and the
// directory is kept for inspection. The figures are the script's output
// (--json passed through). Returns the exit status: the script's, 2 when
// the daemon, the script or python3 is missing.
int RunApiBench(const ApiBenchOptions& options);

}  // namespace dsec::bench
