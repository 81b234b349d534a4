// SPDX-License-Identifier: Apache-2.0
#include "cmd/bench_fncall_commands.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/fncall_bench.h"
#include "base/file_io.h"
#include "sandbox/layers/layer_refs.h"
#include "sandbox/layers/layer_store.h"

namespace dsec::cmd {

void RegisterFncallBenchCommands(CLI::App* bench, CommandRegistry& registry) {
  CLI::App* cmd = bench->add_subcommand(
      "fncall", "fncall tier: python print(1) and bash true latency/throughput, next to a cold "
                "container-tier python3 and host python3");
  struct Options {
    bench::FncallBenchOptions bench;
    std::vector<std::string> python_layers, bash_layers;
    std::string store;
  };
  auto o = std::make_shared<Options>();
  const char* store_env = std::getenv("DSEC_LAYER_STORE");
  o->store = store_env != nullptr && *store_env != '\0' ? store_env : layers::kDefaultStoreRoot;
  cmd->add_option("--calls", o->bench.calls, "Calls per measurement")
      ->capture_default_str()
      ->check(CLI::Range(10, 1000000));
  cmd->add_option("--concurrency", o->bench.concurrency, "Concurrent callers")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--cold-runs", o->bench.cold_runs, "Cold container / host python3 runs")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--python-layers", o->python_layers,
                  "Layers with python3 (files or references; default base:bookworm + python:1)")
      ->delimiter(',');
  cmd->add_option("--bash-layers", o->bash_layers, "Layers with bash (default base:bookworm)")
      ->delimiter(',');
  cmd->add_option("--store", o->store, "Layer store (env DSEC_LAYER_STORE)")->capture_default_str();
  cmd->add_option("--host-python", o->bench.host_python, "Host interpreter for the baseline")
      ->capture_default_str();
  cmd->add_flag("--json", o->bench.json, "Print one JSON object");
  registry.Add(cmd, [o] {
    const layers::LayerRefOptions lo = layers::LayerRefOptionsFor(o->store, SelfExePath());
    auto py = layers::ResolveFncallLayers("python", o->python_layers, lo);
    auto sh = layers::ResolveFncallLayers("bash", o->bash_layers, lo);
    if (!py.ok() || !sh.ok()) {
      fprintf(stderr, "dsec-vmm: layers: %s\n",
              (py.ok() ? sh.status() : py.status()).ToString().c_str());
      return 2;
    }
    bench::FncallBenchOptions b = o->bench;
    b.python_layers = *py;
    b.bash_layers = *sh;
    return bench::RunFncallBench(b);
  });
}

}  // namespace dsec::cmd
