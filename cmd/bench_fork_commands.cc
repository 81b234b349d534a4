// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench fork` (bench/fork_bench.h).
#include "cmd/bench_fork_commands.h"

#include <memory>

#include "bench/fork_bench.h"

namespace dsec::cmd {

void RegisterForkBenchCommands(CLI::App* bench, CommandRegistry& registry) {
  CLI::App* cmd = bench->add_subcommand(
      "fork",
      "A container sandbox forked into N through the API: fork p50/p99 against N plain creates, "
      "host memory per idle child");
  auto o = std::make_shared<bench::ForkBenchOptions>();
  cmd->add_option("--count", o->count, "N: children per fork")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--runs", o->runs, "Forks measured")->capture_default_str()->check(CLI::Range(1, 10000));
  cmd->add_option("--change-kib", o->change_kib, "Files written in the source before the forks (KiB)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--script", o->script, "fork_bench.py (default: the checkout's sdk/python/bench)");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  registry.Add(cmd, [o] { return bench::RunForkBench(*o); });
}

}  // namespace dsec::cmd
