// SPDX-License-Identifier: Apache-2.0
#include "cmd/bench_net_commands.h"

#include <memory>

#include "bench/net_bench.h"

namespace dsec::cmd {

void RegisterNetBenchCommands(CLI::App* bench, CommandRegistry& registry) {
  CLI::App* cmd = bench->add_subcommand(
      "net", "Sandbox network cost: SandboxNetwork setup at N=10,100,1000.. live sandboxes, connect latency "
             "and TCP throughput with and without the egress policy, nftables peer (root; local only)");
  struct Options : bench::NetBenchOptions {
    int bulk_mib = 1024;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--max", o->max, "Largest number of live networked sandboxes (steps 10, 100, ... and this)")
      ->capture_default_str()
      ->check(CLI::Range(1, 60000));
  cmd->add_option("--connects", o->connects, "connect()s per variant")
      ->capture_default_str()
      ->check(CLI::Range(10, 1000000));
  cmd->add_option("--bulk-mib", o->bulk_mib, "MiB per bulk transfer")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--bulk-rounds", o->bulk_rounds, "Bulk transfers per variant (the median counts)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  cmd->add_option("--subnet", o->subnet, "The sandboxes' IPv4 subnet (the bench's own node network)")
      ->capture_default_str();
  cmd->add_option("--outside-subnet", o->outside_subnet,
                  "The fake outside's subnet behind the uplink veth (host .1, outside .2)")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object");
  registry.Add(cmd, [o] {
    bench::NetBenchOptions b = *o;
    b.bulk_bytes = static_cast<uint64_t>(o->bulk_mib) << 20;
    return bench::RunNetBench(b);
  });
}

}  // namespace dsec::cmd
