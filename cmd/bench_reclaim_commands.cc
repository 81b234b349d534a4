// SPDX-License-Identifier: Apache-2.0
#include "cmd/bench_reclaim_commands.h"

#include <memory>

#include "bench/reclaim_bench.h"
#include "base/file_io.h"
#include "vmm/monitor/default_paths.h"

namespace dsec::cmd {

void RegisterReclaimBenchCommands(CLI::App* bench, CommandRegistry& registry) {
  CLI::App* reclaim = bench->add_subcommand(
      "reclaim",
      "Time-integrated memory (GiB x s) of K guests running `phases`: reclaim off, balloon, "
      "pageout, both");
  auto opts = std::make_shared<bench::ReclaimBenchOptions>();
  reclaim->add_option("--vms", opts->vms, "Test guests at once per mode")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  reclaim->add_option("--mem-mib", opts->mem_mib, "Guest RAM")->capture_default_str()->check(CLI::Range(64, 65536));
  reclaim->add_option("--touch-mib", opts->touch_mib, "phases: memory touched first")
      ->capture_default_str()
      ->check(CLI::Range(2, 65536));
  reclaim->add_option("--hot-mib", opts->hot_mib, "phases: hot set kept busy")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  reclaim->add_option("--hot-passes", opts->hot_passes, "phases: writes of the hot set")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  reclaim->add_option("--idle-s", opts->idle_s, "phases: idle seconds at the end")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600));
  reclaim->add_option("--sample-ms", opts->sample_ms, "Memory sampling period")
      ->capture_default_str()
      ->check(CLI::Range(10, 10000));
  reclaim->add_option("--rounds", opts->rounds, "Repeat the modes (interleaved), average")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  reclaim->add_option("--modes", opts->modes, "Subset of off,balloon,pageout,both")
      ->delimiter(',')
      ->check(CLI::IsMember({"off", "balloon", "pageout", "both"}));
  reclaim->add_option("--vm-arg", opts->vm_args,
                      "Extra `vm run` argument for the reclaim modes, e.g. "
                      "--vm-arg=--reclaim-aggressiveness=0.8 (repeatable)");
  reclaim->add_option("--kernel", opts->kernel,
                      "Test guest ELF (default: the one built next to dsec-vmm)");
  reclaim->add_flag("--json", opts->json, "Print one JSON object");
  registry.Add(reclaim, [opts] {
    bench::ReclaimBenchOptions o = *opts;
    o.monitor = monitor::MonitorBinaryPath();
    if (o.kernel.empty()) o.kernel = monitor::DefaultTestGuestPath();
    return bench::RunReclaimBench(o);
  });
}

}  // namespace dsec::cmd
