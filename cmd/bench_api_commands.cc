// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench api` (bench/api_bench.h).
#include "cmd/bench_api_commands.h"

#include <memory>

#include "bench/api_bench.h"

namespace dsec::cmd {

void RegisterApiBenchCommands(CLI::App* bench, CommandRegistry& registry) {
  CLI::App* cmd = bench->add_subcommand(
      "api", "create + exec + delete through the Python SDK per tier (p50, p99), sustained creates/s");
  auto o = std::make_shared<bench::ApiBenchOptions>();
  cmd->add_option("--iterations", o->iterations, "Timed create+exec+delete cycles per tier")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--rate-seconds", o->rate_seconds, "Sustained-create phase per tier")
      ->capture_default_str()
      ->check(CLI::Range(0.5, 3600.0));
  cmd->add_option("--concurrency", o->concurrency, "Clients in the sustained-create phase")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--script", o->script, "api_bench.py (default: the checkout's sdk/python/bench)");
  cmd->add_flag("--json", o->json, "Print one JSON object: {\"tiers\": [{tier, p50_ms, p99_ms, per_s}]}");
  registry.Add(cmd, [o] { return bench::RunApiBench(*o); });
}

}  // namespace dsec::cmd
