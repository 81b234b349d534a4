// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench density`: idle sandboxes of one tier ramped through the
// API of a private daemon until N or until the node refuses, with latency,
// liveness and memory per sandbox at each step.
#pragma once

#include <string>

namespace dsec::bench {

struct DensityBenchOptions {
  bool json = false;
  std::string tier = "container";
  int max = 1000;              // N: the ramp's last step, at most
  int sample = 20;             // K: execs and create+delete probes per step
  std::string steps;           // "10,100,1000"; "" = those of 10, 100, 1000, 10000 below max, then max
  int delete_concurrency = 4;  // clients deleting everything at the end
  std::string ksm;             // microvm: on|off|both; "" = as the host is
  std::string daemon_options;  // more dsec-vmmd options, split at blanks
  std::string script;          // density_bench.py; "" = $DSEC_DENSITY_BENCH_SCRIPT or the checkout's
};

// Runs sdk/python/bench/density_bench.py (the measurement, through libdsec)
// against a private node daemon (daemon_script.h) allowed max + 1 sandboxes
// (room for the probes' creates at N) unless `daemon_options` names
// --max-sandboxes; the script gets the daemon's pid and container state
// directory to find the sandboxes' memory cgroups. Returns the script's
// exit status, 2 when something it needs is missing, 130 when interrupted.
int RunDensityBench(const DensityBenchOptions& options);

}  // namespace dsec::bench
