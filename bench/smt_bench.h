// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

namespace dsec::bench {

struct SmtBenchOptions {
  bool json = false;
  int samples = 300;         // plain-thread LS units timed per mode
  int guest_samples = 60;    // test-guest LS units per mode (0: skip the guest)
  double unit_ms = 5;        // target length of one plain-thread unit, alone
  double guest_unit_ms = 10;  // target length of one test-guest unit, alone
  double budget_s = 50;      // wall-clock cap for all timed runs together
  std::string kernel;        // the test guest ELF ("" skips the guest workload)
};

// `dsec-vmm bench smt`: an LS latency unit (a fixed amount of work: a
// pointer chase over an L2-sized ring as a plain thread, and `spin:N` at
// CPL3 in the test guest via vm::Vm) is timed many times alone, then next to
// BE noise threads (memory bandwidth, ALU, cache thrash) placed:
//   unmanaged   - every thread may run on every CPU;
//   same-core   - BE pinned to the LS thread's physical core (its SMT
//                 siblings; on a host without SMT, the LS CPU itself);
//   core-sched  - as same-core, with one PR_SCHED_CORE cookie per side
//                 (only where the kernel has it; reported absent otherwise);
//   partitioned - sched's placement engine and cpuset fallback: LS on a
//                 whole core in its own cpuset, BE in another on the rest.
// Prints p50/p99 of the unit time and the slowdown against alone per mode
// and workload. Returns the process exit status.
int RunSmtBench(const SmtBenchOptions& options);

}  // namespace dsec::bench
