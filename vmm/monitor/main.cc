// SPDX-License-Identifier: Apache-2.0
// dsec-monitor: the microVM monitor binary, one process per VM. It carries
// only monitor code (no daemon, sandbox tiers or benchmarks), so that its
// start-up and resident memory, paid once per VM, stay small.
#include <malloc.h>

#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "vmm/monitor/monitor.h"
#include "vmm/monitor/monitor_options.h"

int main(int argc, char** argv) {
  (void)dsec::monitor::MainEntryNs();  // latch the time main() was reached
  // Every thread allocates from glibc's main arena (brk/mmap), before any
  // thread exists. A thread's own arena, the first time its heap shrinks,
  // makes glibc open /proc/sys/vm/overcommit_memory (check_may_shrink_heap):
  // off every jailed thread's list, so a guest flooding vsock stopped its
  // monitor when the event loop freed its buffers. One arena also spares the
  // 64 MiB reservations and their touched pages that each arena costs a VM.
  ::mallopt(M_ARENA_MAX, 1);
  CLI::App app{"dsec-monitor: boots one microVM and runs it until the guest stops"};
  dsec::monitor::MonitorFlags flags;
  dsec::monitor::AddMonitorFlags(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors: one clear line (CLI11 prints it), exit status 2.
    const int rc = app.exit(e);
    return rc == 0 ? 0 : dsec::monitor::kExitUsage;
  }
  absl::StatusOr<dsec::monitor::MonitorOptions> options = dsec::monitor::ResolveMonitorOptions(flags);
  if (!options.ok()) {
    std::fprintf(stderr, "dsec-monitor: %s\n", std::string(options.status().message()).c_str());
    return dsec::monitor::kExitUsage;
  }
  if (flags.print_config) {
    std::printf("%s\n", dsec::monitor::MonitorOptionsToJson(*options).dump(2).c_str());
    return 0;
  }
  return dsec::monitor::RunMonitor(*options);
}
