// SPDX-License-Identifier: Apache-2.0
// dsec-monitor: the microVM monitor binary, one process per VM. It carries
// only monitor code (no daemon, sandbox tiers or benchmarks), so that its
// start-up and resident memory, paid once per VM, stay small.
#include <cstdio>

#include "CLI/CLI.hpp"
#include "vmm/monitor/monitor.h"

int main(int argc, char** argv) {
  (void)dsec::monitor::MainEntryNs();  // latch the time main() was reached
  CLI::App app{"dsec-monitor: boots one microVM and runs it until the guest stops"};
  dsec::monitor::MonitorOptions opts;
  dsec::monitor::AddMonitorFlags(app, opts);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors: one clear line (CLI11 prints it), exit status 2.
    const int rc = app.exit(e);
    return rc == 0 ? 0 : dsec::monitor::kExitUsage;
  }
  return dsec::monitor::RunMonitor(opts);
}
