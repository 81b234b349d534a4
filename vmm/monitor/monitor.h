// SPDX-License-Identifier: Apache-2.0
// The monitor process: one microVM from its typed configuration (flags
// today), run until the guest stops, its control socket and reclaim
// controller beside it, and the exit status that says how it stopped
// (README.md has the table). `dsec-monitor` is this plus a main(); `dsec-vmm
// vm run` execs it with the same arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "vmm/monitor/vm_reclaim.h"
#include "vmm/vm/vm_config.h"

namespace dsec::monitor {

struct MonitorOptions {
  vm::VmConfig config;
  std::string console = "stdio";
  std::string boot = "auto";
  std::string pit = "user";
  std::string qos;
  std::string stats_json;
  std::string log_level = "warn";
  bool quiet_report = false;
  std::vector<std::string> disks;
  std::vector<std::string> nets;
  std::string vsock;
  std::vector<std::string> pmems;
  ReclaimRunOptions reclaim;
  std::string control;
};

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

// Adds the monitor's flags to `app`.
void AddMonitorFlags(CLI::App& app, MonitorOptions& opts);

// Boots the VM and runs it until it stops; returns the exit status.
int RunMonitor(MonitorOptions& opts);

// CLOCK_MONOTONIC when main() started (latched on the first call): the
// boot breakdown's process start -> main is exec and start-up.
int64_t MainEntryNs();

}  // namespace dsec::monitor
