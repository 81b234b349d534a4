// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench reclaim`: time-integrated host memory of K test guests
// running `phases` (touch a large set, free all but a hot set, keep the hot
// set busy, idle) with reclaim off, balloon only, pageout only and both.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dsec::bench {

struct ReclaimBenchOptions {
  int vms = 2;
  int mem_mib = 384;
  int touch_mib = 256;
  int hot_mib = 32;
  int hot_passes = 6000;
  int idle_s = 8;
  int sample_ms = 100;
  int rounds = 1;  // repeat the four modes (interleaved) and average
  std::vector<std::string> modes = {"off", "balloon", "pageout", "both"};
  bool json = false;
  std::string monitor;  // the monitor binary to spawn (dsec-monitor)
  std::string kernel;    // the test guest ELF
  std::vector<std::string> vm_args;  // extra `vm run` arguments (reclaim knobs)
  uint64_t timeout_ms = 300'000;     // per VM
};

// One memory sample of all monitors of a mode.
struct MemSample {
  int64_t t_ns = 0;
  uint64_t bytes = 0;
};

// Time-integrated memory in GiB x s (trapezoids between samples; samples in
// time order; fewer than two samples integrate to 0).
double IntegrateGiBSeconds(std::span<const MemSample> samples);
uint64_t PeakBytes(std::span<const MemSample> samples);
// 1 - mode / off (0 when off is 0).
double Reduction(double mode, double off);
// mode / off - 1 (0 when off is 0).
double Slowdown(double mode_ms, double off_ms);
// "... phase name=<phase> ms=<N>" anywhere in `line` (the monitor prefixes
// test-device messages with "testguest: "); nullopt if not that phase.
std::optional<uint64_t> ParsePhaseMs(std::string_view line, std::string_view phase);
// The zram device numbers in /proc/swaps text ("/dev/zram3 partition ...").
std::vector<int> ZramSwapIds(std::string_view proc_swaps);

// Runs the benchmark; returns the exit status (0 ok, 1 a VM failed, 2 bad
// options, 130 interrupted).
int RunReclaimBench(const ReclaimBenchOptions& options);

}  // namespace dsec::bench
