// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench fork` (bench/fork_bench.h) and `bench snapshot`
// (bench/snapshot_bench.h).
#include "cmd/bench_fork_commands.h"

#include <memory>

#include "bench/fork_bench.h"
#include "bench/snapshot_bench.h"

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

  CLI::App* snap = bench->add_subcommand(
      "snapshot",
      "microVM snapshots of the test guest: snapshot time per GiB, restore p50/p99, N clones, "
      "host memory per idle clone (dsec-monitor --restore processes)");
  auto s = std::make_shared<bench::SnapshotBenchOptions>();
  snap->add_option("--mem-mib", s->mem_mib, "Guest RAM")->capture_default_str()->check(CLI::Range(32, 65536));
  snap->add_option("--touch-mib", s->touch_mib, "Guest RAM the guest writes before the snapshot")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  snap->add_option("--runs", s->runs, "Restores measured")->capture_default_str()->check(CLI::Range(1, 10000));
  snap->add_option("--clones", s->clones, "Clones restored together")->capture_default_str()->check(CLI::Range(1, 256));
  snap->add_option("--kernel", s->kernel, "Test guest ELF (default: beside the binary)");
  snap->add_option("--dir", s->dir, "Directory for the snapshot (default: a temporary one, removed)");
  snap->add_option("--peer", s->peer, "qemu: the same guest saved and restored by QEMU, and the ratios")
      ->check(CLI::IsMember({"qemu"}));
  snap->add_option("--qemu", s->qemu, "QEMU binary for --peer qemu")->capture_default_str();
  snap->add_option("--peer-runs", s->peer_runs, "Process restores measured (ours and the peer's)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  snap->add_flag("--json", s->json, "Print one JSON object");
  registry.Add(snap, [s] { return bench::RunSnapshotBench(*s); });
}

}  // namespace dsec::cmd
