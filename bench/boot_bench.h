// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>

namespace dsec::bench {

struct BootBenchOptions {
  int runs = 20;
  int concurrency = 1;
  std::string peer;        // "" or "qemu"
  bool json = false;
  std::string monitor;    // the monitor binary to spawn (dsec-monitor)
  std::string kernel;      // the test guest ELF
  uint64_t mem_mib = 64;
  std::string qemu = "qemu-system-x86_64";
};

// `dsec-vmm bench boot`: boots the test guest `runs` times as separate
// `dsec-vmm vm run` processes and prints p50/p99 of process start -> first
// guest instruction, -> first CPL3 instruction, -> guest shutdown, and the
// monitor's own memory; with a peer, boots the same ELF under QEMU microvm
// (PVH entry) interleaved and prints whole-process wall time and peak RSS of
// both, with ratios. Returns the process exit status.
int RunBootBench(const BootBenchOptions& options);

}  // namespace dsec::bench
