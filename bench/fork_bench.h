// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench fork`: a container sandbox forked into N through the API
// of a private daemon, against N plain creates, and host memory per idle
// child.
#pragma once

#include <string>

namespace dsec::bench {

struct ForkBenchOptions {
  bool json = false;
  int count = 8;          // children per fork
  int runs = 20;          // forks measured
  int change_kib = 1024;  // files written in the source before the forks
  std::string script;     // fork_bench.py; "" = $DSEC_FORK_BENCH_SCRIPT or the checkout's
};

// Runs sdk/python/bench/fork_bench.py (the measurement, through libdsec)
// against a private node daemon (daemon_script.h) allowed room for the
// source, one fork's children and the plain creates. Returns the script's
// exit status, 2 when something it needs is missing, 130 when interrupted.
int RunForkBench(const ForkBenchOptions& options);

}  // namespace dsec::bench
