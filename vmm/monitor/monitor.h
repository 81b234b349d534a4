// SPDX-License-Identifier: Apache-2.0
// The monitor process: one microVM from its typed configuration
// (monitor_options.h: flags or a config file), run until the guest stops,
// its control socket and reclaim controller beside it, and the exit status
// that says how it stopped (README.md has the table). `dsec-monitor` is this plus a main(); `dsec-vmm
// vm run` execs it with the same arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vmm/monitor/monitor_options.h"

namespace dsec::monitor {

// The monitor's exit statuses (README.md, "dsec-vmm vm run").
enum ExitStatus {
  kExitGuestOk = 0,
  kExitGuestError = 1,
  kExitUsage = 2,
  kExitReset = 3,
  kExitTripleFault = 4,
  kExitInternal = 5,
  kExitTimeout = 6,
  kExitSignal = 7,
};

// The exit status for how the VM stopped.
int ExitStatusFor(const vm::StopInfo& stop);

// Boots the VM and runs it until it stops; returns the exit status.
int RunMonitor(const MonitorOptions& opts);

// CLOCK_MONOTONIC when main() started (latched on the first call): the
// boot breakdown's process start -> main is exec and start-up.
int64_t MainEntryNs();

}  // namespace dsec::monitor
