// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench microvm [--json]` (bench/microvm_bench.h).
#include "cmd/bench_microvm_commands.h"

#include <memory>

#include "bench/microvm_bench.h"

namespace dsec::cmd {

void RegisterMicrovmBenchCommands(CLI::App* bench, CommandRegistry& registry) {
  CLI::App* cmd = bench->add_subcommand(
      "microvm", "microVM sandboxes: create->first exec p50/p99, idle memory, VMs per GiB (skips where CPL0 is emulated)");
  auto o = std::make_shared<bench::MicrovmBenchOptions>();
  cmd->add_option("--runs", o->runs, "Sandboxes created one after another for the latency")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--idle", o->idle, "Idle microVMs held at once for the memory figures")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--mem-mib", o->mem_mib, "Guest RAM per microVM")->capture_default_str();
  cmd->add_option("--kernel", o->kernel, "Guest kernel (default <cache>/guest-kernel/current/vmlinux)");
  cmd->add_option("--rootfs", o->rootfs, "Guest root image (default <cache>/guest-image/rootfs.erofs)");
  cmd->add_option("--layer", o->layers, "Layer image (repeatable; default base:bookworm from --store if present)");
  cmd->add_option("--store", o->store, "Layer store for the default layer")->capture_default_str();
  cmd->add_option("--state-dir", o->state_root, "State root (default /run/dsec-vmm/microvm-bench-<pid>)");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  registry.Add(cmd, [o] { return bench::RunMicrovmBench(*o); });
}

}  // namespace dsec::cmd
