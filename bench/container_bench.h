// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench container`: container-tier sandbox latency, sustained
// rate and idle memory, with crun measured side by side in the same run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dsec::bench {

struct ContainerBenchOptions {
  bool json = false;
  int iterations = 200;  // timed create+exec+destroy cycles per side
  int sustained = 300;   // cycles for each sustained-rate figure
  int workers = 2;       // concurrent workers of the second sustained figure
  int idle = 32;         // idle sandboxes held at once for the memory figure
  // Pause before each timed run (ours, crun's, the CLI's), so that each
  // arrives alone, as sporadic creates do, rather than back to back (0).
  int gap_ms = 0;
  std::string crun = "/usr/bin/crun";  // "" = no peer
  std::string self_exe;  // dsec-vmm, for the CLI figure ("" = skip it)
  // Keep the container tier's state dirs on the work dir's disk file system
  // instead of a tmpfs (to show what a disk-backed /run costs).
  bool state_on_disk = false;
  // Also time creates with a network (sandbox/network: veth, address,
  // egress policy with nothing allowed), interleaved with the plain ones,
  // on a subnet of the bench's own with no uplink.
  bool network = false;
  std::string net_subnet = "10.246.0.0/16";
};

// Pure helpers (unit-tested).
struct LatencySummary {
  size_t n = 0;
  double p50 = 0, p99 = 0, mean = 0, min = 0, max = 0;
};
// Nearest-rank p50/p99 (bench::Percentile), mean, min and max of `samples`.
LatencySummary Summarize(const std::vector<double>& samples);
// count / wall_s; 0 when wall_s <= 0.
double PerSecond(size_t count, double wall_s);
// (after - before) / items in KiB; 0 when items <= 0. May be negative
// (memory given back by other activity while measuring).
double PerItemKib(int64_t before_bytes, int64_t after_bytes, int items);
// A "Key:   123 kB" field of /proc/meminfo text, in KiB.
std::optional<uint64_t> MeminfoKib(std::string_view meminfo, std::string_view key);

// Prints the figures (one JSON object with `json`). Returns the exit status:
// 0 done, 1 failed (the reason on stderr).
//
// What is measured:
//  - latency: `iterations` cycles of Sandbox::Create + Exec(`true`) +
//    Destroy in this process (the daemon's path), interleaved with
//    `crun run --bundle B ID` (`true`, same image as an overlay, same
//    namespaces, limits and capabilities; process start included, since
//    crun is a CLI) and with `dsec-vmm sandbox run -- true` (the same for
//    the container tier's CLI);
//  - sustained: `sustained` cycles back to back, then the same number
//    spread over `workers` threads;
//  - idle memory: the process moves itself into a fresh memory cgroup of
//    its own, creates `idle` sandboxes whose init sleeps, and divides the
//    growth of that cgroup's (hierarchical) charge by their number; see
//    the README for what it counts.
int RunContainerBench(const ContainerBenchOptions& options);

}  // namespace dsec::bench
