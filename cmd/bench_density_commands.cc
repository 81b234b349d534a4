// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench density` (bench/density_bench.h).
#include "cmd/bench_density_commands.h"

#include <memory>

#include "bench/density_bench.h"

namespace dsec::cmd {

void RegisterDensityBenchCommands(CLI::App* bench, CommandRegistry& registry) {
  CLI::App* cmd = bench->add_subcommand(
      "density",
      "Idle sandboxes of one tier ramped through the API to N: create/exec/delete p50/p99 and memory "
      "per sandbox at each step, where the node refuses, delete-all time");
  auto o = std::make_shared<bench::DensityBenchOptions>();
  cmd->add_option("--tier", o->tier, "Tier of the sandboxes")
      ->capture_default_str()
      ->check(CLI::IsMember({"container", "fncall", "microvm"}));
  cmd->add_option("--max", o->max, "N: sandboxes to ramp to at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--sample", o->sample,
                  "K: execs (spread over the live sandboxes) and create+delete probes at each step")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--steps", o->steps,
                  "Densities to measure at; the ramp ends at the last, e.g. 10,100,1000 (default: "
                  "those of 10, 100, 1000, 10000 below --max, then --max)");
  cmd->add_option("--delete-concurrency", o->delete_concurrency, "Clients deleting all at the end")
      ->capture_default_str()
      ->check(CLI::Range(1, 32));
  cmd->add_option("--ksm", o->ksm, "microvm: KSM during the ramp (both: a ramp with each; restored after)")
      ->check(CLI::IsMember({"on", "off", "both"}));
  cmd->add_option("--keep-daemon-options", o->daemon_options,
                  "More dsec-vmmd options, e.g. \"--max-sandboxes 50\" (then not set to --max + 1)");
  cmd->add_option("--script", o->script, "density_bench.py (default: the checkout's sdk/python/bench)");
  cmd->add_flag("--json", o->json, "Print one JSON object: {tier, steps: [...], stop, delete_all, ...}");
  registry.Add(cmd, [o] { return bench::RunDensityBench(*o); });
}

}  // namespace dsec::cmd
