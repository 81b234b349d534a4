// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench ...`: benchmark programs that print their figures.
#include <memory>

#include "CLI/CLI.hpp"
#include "bench/boot_bench.h"
#include "bench/smt_bench.h"
#include "cmd/bench_api_commands.h"
#include "cmd/bench_container_commands.h"
#include "cmd/bench_density_commands.h"
#include "cmd/bench_fncall_commands.h"
#include "cmd/bench_fork_commands.h"
#include "cmd/bench_microvm_commands.h"
#include "cmd/bench_net_commands.h"
#include "cmd/bench_pmem_commands.h"
#include "cmd/bench_reclaim_commands.h"
#include "cmd/bench_virtio_commands.h"
#include "cmd/command.h"
#include "base/file_io.h"
#include "vmm/monitor/default_paths.h"
#include "cmd/layer_commands.h"

namespace dsec::cmd {

void RegisterBenchCommands(CLI::App& app, CommandRegistry& registry) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (print figures; see docs/benchmarks.md)");
  bench->require_subcommand(1);
  RegisterVirtioBenchCommands(bench, registry);
  RegisterPmemBenchCommands(bench, registry);
  RegisterLayerBenchCommands(bench, registry);
  RegisterFncallBenchCommands(bench, registry);
  RegisterContainerBenchCommands(bench, registry);
  RegisterMicrovmBenchCommands(bench, registry);
  RegisterReclaimBenchCommands(bench, registry);
  RegisterApiBenchCommands(bench, registry);
  RegisterDensityBenchCommands(bench, registry);
  RegisterForkBenchCommands(bench, registry);
  RegisterNetBenchCommands(bench, registry);

  CLI::App* boot = bench->add_subcommand("boot", "Boot the test guest N times and time it");
  auto opts = std::make_shared<bench::BootBenchOptions>();
  boot->add_option("--runs", opts->runs, "Boots to time")->capture_default_str()->check(CLI::Range(1, 100000));
  boot->add_option("--concurrency", opts->concurrency, "Boots in flight at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  boot->add_option("--peer", opts->peer, "Also boot the same guest under a peer monitor")
      ->check(CLI::IsMember({"qemu"}));
  boot->add_option("--mem-mib", opts->mem_mib, "Guest RAM")->capture_default_str();
  boot->add_option("--kernel", opts->kernel, "Test guest ELF (default: the one built next to dsec-vmm)");
  boot->add_flag("--json", opts->json, "Print one JSON object");
  registry.Add(boot, [opts] {
    bench::BootBenchOptions o = *opts;
    o.monitor = monitor::MonitorBinaryPath();
    if (o.kernel.empty()) o.kernel = monitor::DefaultTestGuestPath();
    return bench::RunBootBench(o);
  });

  CLI::App* smt = bench->add_subcommand(
      "smt", "LS latency next to BE noise: unmanaged, same-core, core-sched, partitioned");
  auto smt_opts = std::make_shared<bench::SmtBenchOptions>();
  smt->add_option("--samples", smt_opts->samples, "Plain-thread LS units per mode")
      ->capture_default_str()
      ->check(CLI::Range(5, 100000));
  smt->add_option("--guest-samples", smt_opts->guest_samples,
                  "Test-guest LS units per mode (0: no guest)")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  smt->add_option("--unit-ms", smt_opts->unit_ms, "Target plain-thread unit length")
      ->capture_default_str();
  smt->add_option("--guest-unit-ms", smt_opts->guest_unit_ms, "Target test-guest unit length")
      ->capture_default_str();
  smt->add_option("--budget-s", smt_opts->budget_s, "Cap on all timed runs together")
      ->capture_default_str();
  smt->add_option("--kernel", smt_opts->kernel,
                  "Test guest ELF (default: the one built next to dsec-vmm)");
  smt->add_flag("--json", smt_opts->json, "Print one JSON object");
  registry.Add(smt, [smt_opts] {
    bench::SmtBenchOptions o = *smt_opts;
    if (o.kernel.empty()) o.kernel = monitor::DefaultTestGuestPath();
    return bench::RunSmtBench(o);
  });
}

}  // namespace dsec::cmd
