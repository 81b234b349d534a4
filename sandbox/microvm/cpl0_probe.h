// SPDX-License-Identifier: Apache-2.0
// The host capability probe of the microvm tier: does guest CPL0 code run
// on hardware here? It boots the test guest with its `cpl0-probe` workload
// (a two-instruction loop run N times at CPL3, then N times at CPL0) under
// the real dsec-vmm and reads the cycles per CPL0 round. With hardware
// virtualisation a round costs ~1-3 cycles; where the hypervisor emulates
// CPL0 (PVM, HOST.md) thousands, and a Linux guest cannot boot in useful
// time, so the tier refuses creates at once instead of waiting out a boot
// timeout.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace dsec::microvm {

// Above this many cycles per CPL0 loop round, CPL0 is taken as emulated.
inline constexpr double kCpl0EmulatedCyclesPerRound = 100;
inline constexpr uint64_t kCpl0ProbeIterations = 20000;

struct Cpl0Probe {
  uint64_t iterations = 0;
  uint64_t cpl3_cycles = 0;
  uint64_t ucall_cycles = 0;
  uint64_t cpl0_cycles = 0;
  double wall_ms = 0;  // the whole probe VM, spawn to exit

  double cycles_per_round() const {
    return iterations == 0 ? 0 : static_cast<double>(cpl0_cycles) / static_cast<double>(iterations);
  }
  bool emulated() const { return cycles_per_round() > kCpl0EmulatedCyclesPerRound; }
};

// Finds "result workload=cpl0-probe iterations=N cpl3_cycles=A
// ucall_cycles=U cpl0_cycles=B" in the monitor's output.
absl::StatusOr<Cpl0Probe> ParseCpl0ProbeOutput(std::string_view output);

// Runs `monitor_binary vm run [--kernel testguest] --cmdline "console=ttyS0
// testguest.run=cpl0-probe:20000"` (testguest "" = the monitor's built-in
// default, the test guest beside it) and parses its report. Unavailable
// (with the monitor's output) if it cannot run or reports nothing within
// timeout_ms.
absl::StatusOr<Cpl0Probe> RunCpl0Probe(const std::string& monitor_binary, const std::string& testguest,
                                       int64_t timeout_ms = 20000);

// "microvm tier: guest kernel code is emulated on this host (PVM): <B/N>
// cycles per CPL0 loop round; a Linux guest needs hardware virtualisation
// (HOST.md)"
std::string EmulatedCpl0Reason(const Cpl0Probe& probe);

}  // namespace dsec::microvm
