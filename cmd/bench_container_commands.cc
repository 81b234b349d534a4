// SPDX-License-Identifier: Apache-2.0
#include "cmd/bench_container_commands.h"

#include <memory>

#include "bench/container_bench.h"
#include "base/file_io.h"
#include "vmm/monitor/default_paths.h"

namespace dsec::cmd {

void RegisterContainerBenchCommands(CLI::App* bench, CommandRegistry& registry) {
  CLI::App* ctr = bench->add_subcommand(
      "container",
      "Container sandboxes: create+exec(true)+destroy latency, sustained rate, idle memory; "
      "crun side by side");
  auto opts = std::make_shared<bench::ContainerBenchOptions>();
  auto no_cli_flag = std::make_shared<bool>(false);
  ctr->add_option("--iterations", opts->iterations, "Timed cycles per side")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  ctr->add_option("--sustained", opts->sustained, "Cycles for each sustained-rate figure")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  ctr->add_option("--workers", opts->workers, "Concurrent workers of the second sustained figure")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  ctr->add_option("--idle", opts->idle, "Idle sandboxes held at once for the memory figure")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  ctr->add_option("--gap-ms", opts->gap_ms,
                  "Pause before each timed run, so that each arrives alone (sporadic creates)")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000));
  ctr->add_option("--crun", opts->crun, "crun binary (\"\" = no peer)")->capture_default_str();
  ctr->add_flag("--no-cli", *no_cli_flag, "Skip the `dsec-vmm sandbox run` process figure");
  ctr->add_flag("--state-on-disk", opts->state_on_disk,
                "Keep sandbox state dirs on disk (/tmp) instead of a tmpfs, for comparison");
  ctr->add_flag("--network", opts->network,
                "Also time creates with a network (veth, address, egress policy), interleaved");
  ctr->add_option("--net-subnet", opts->net_subnet, "Subnet of those networks (no uplink)")->capture_default_str();
  ctr->add_flag("--json", opts->json, "Print one JSON object");
  registry.Add(ctr, [opts, no_cli_flag] {
    bench::ContainerBenchOptions o = *opts;
    if (!*no_cli_flag) o.self_exe = SelfExePath();
    return bench::RunContainerBench(o);
  });
}

}  // namespace dsec::cmd
