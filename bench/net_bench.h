// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench net`: what a sandbox's network and its egress policy
// cost on this host, with no traffic leaving the machine (the bench's own
// subnet, and an "outside" namespace behind a veth as the node's uplink;
// net_bench_env.h). Each sandbox is a network namespace plus a cgroup v2
// directory (no container), so the figures are sandbox/network's alone:
//
//  1. setup as the work grows: N = 10, 100, 1000 ... up to --max live
//     networked sandboxes; SandboxNetwork::Create and its destruction
//     p50/p99 per step, and host memory per networked sandbox
//     (MemAvailable, slab, per-CPU, BPF memlock, descriptors, the bench's
//     own RSS);
//  2. connect+close latency to a listener outside: the sandbox's own
//     loopback, the veth with no programs, with the egress policy allowing
//     it, with the same allow rule as an nftables filter in the sandbox's
//     namespace (the way iptables/nft-based runtimes enforce egress); and
//     how long a denied connect takes to fail;
//  3. TCP bulk throughput sandbox -> outside for the same four.
// Peers are interleaved round by round; ratios come from the same run.
#pragma once

#include <cstdint>
#include <string>

namespace dsec::bench {

struct NetBenchOptions {
  int max = 1000;                      // largest N of the setup steps
  int connects = 2000;                 // per variant, in 10 interleaved rounds
  uint64_t bulk_bytes = uint64_t{1} << 30;  // per bulk run
  int bulk_rounds = 3;                 // per variant, interleaved; the median counts
  std::string subnet = "10.254.0.0/16";
  std::string outside_subnet = "198.19.254.0/24";
  bool json = false;
};

// Prints the figures (text, or one JSON object with --json); returns the
// exit status (0, 1 on failure, 2 without root, 130 on SIGINT/SIGTERM).
int RunNetBench(const NetBenchOptions& options);

}  // namespace dsec::bench
