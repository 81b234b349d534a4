// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench microvm [--json]`: microVM sandboxes through the real
// launcher (a jailed dsec-vmm booting the guest kernel, dsec-agent as PID 1).
//  - create_exec_p50_ms / _p99_ms: create (spawn, boot, agent HELLO) to the
//    result of the first exec, over --runs sandboxes made one at a time;
//  - idle_kib: host memory of one idle microVM that is not guest RAM: the
//    monitor's RSS minus the guest pages it has touched (control socket
//    `stats`: process.vm_rss - guest_resident_bytes), mean over --idle VMs;
//  - idle_guest_kib: the guest RAM those idle VMs touched (mean);
//  - per_gib: idle microVMs per GiB of host memory, counting both.
// Where guest CPL0 code is emulated (PVM) nothing of this can run: the
// CPL0 probe's reason is printed and the exit status is 0.
#include "cmd/bench_microvm_commands.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file_io.h"
#include "vmm/api/control.h"
#include "vmm/monitor/default_paths.h"
#include "nlohmann/json.hpp"
#include "sandbox/container/state_dir.h"
#include "sandbox/layers/layer_store.h"
#include "sandbox/microvm/cpl0_probe.h"
#include "sandbox/microvm/microvm_sandbox.h"
#include "sandbox/microvm/vm_launcher.h"
#include "sandbox/microvm/vm_process.h"

namespace dsec::cmd {

namespace {

struct MicrovmBenchOptions {
  int runs = 20;
  int idle = 8;
  uint64_t mem_mib = 256;
  std::string kernel;
  std::string rootfs;
  std::vector<std::string> layers;  // images; default: base:bookworm from the store if present
  std::string store = layers::kDefaultStoreRoot;
  std::string state_root;
  bool json = false;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// A number field of a JSON object, 0 when absent, null or not a number.
double Num(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return 0;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0;
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "dsec-vmm: bench microvm: %s\n", what.c_str());
  return 1;
}

int RunMicrovmBench(MicrovmBenchOptions o) {
  const std::string monitor_bin = monitor::MonitorBinaryPath();
  if (monitor_bin.empty()) return Fail("the monitor binary dsec-monitor was not found beside dsec-vmm");
  auto probe = microvm::RunCpl0Probe(monitor_bin, monitor::DefaultTestGuestPath());
  if (!probe.ok()) return Fail(std::string(probe.status().message()));
  if (probe->emulated()) {
    const std::string reason = microvm::EmulatedCpl0Reason(*probe);
    if (o.json) {
      std::printf("%s\n", nlohmann::json{{"skipped", reason}}.dump().c_str());
    } else {
      std::printf("bench microvm: skipped: %s\n", reason.c_str());
    }
    return 0;
  }
  microvm::VmLauncherOptions lo;
  lo.monitor_binary = monitor_bin;
  lo.kernel = o.kernel;
  lo.rootfs = o.rootfs;
  lo.skip_probe = true;  // just ran
  microvm::VmLauncher launcher(lo);
  if (absl::Status s = launcher.CheckHost(); !s.ok()) return Fail(std::string(s.message()));

  agent::ExecRequest first;
  if (o.layers.empty()) {
    if (auto store = layers::LayerStore::Create(o.store); store.ok()) {
      if (auto chain = store->Chain("base:bookworm"); chain.ok()) {
        for (const layers::LayerInfo& l : *chain) o.layers.push_back(l.image_path);
      }
    }
  }
  // With a Debian layer: `true`; on the bare root image only the agent is there.
  first.argv = o.layers.empty() ? std::vector<std::string>{"/dsec-agent", "--help"}
                                : std::vector<std::string>{"true"};
  microvm::MicrovmSandboxOptions so;
  so.state_root = o.state_root.empty() ? absl::StrCat("/run/dsec-vmm/microvm-bench-", ::getpid()) : o.state_root;
  auto spec_for = [&o](const std::string& id) {
    microvm::MicrovmSpec s;
    s.id = id;
    s.layers = o.layers;
    s.memory_mib = o.mem_mib;
    return s;
  };

  std::vector<double> create_exec_ms;
  for (int i = 0; i < o.runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto sb = microvm::MicrovmSandbox::Create(launcher, spec_for(absl::StrCat("bench-", i)), so);
    if (!sb.ok()) return Fail(std::string(sb.status().message()));
    auto done = (*sb)->Exec(first, nullptr);
    const auto t1 = std::chrono::steady_clock::now();
    if (!done.ok()) return Fail(absl::StrCat("first exec: ", done.status().message()));
    create_exec_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    (void)(*sb)->Destroy();
  }

  std::vector<std::unique_ptr<microvm::MicrovmSandbox>> idle;
  for (int i = 0; i < o.idle; ++i) {
    auto sb = microvm::MicrovmSandbox::Create(launcher, spec_for(absl::StrCat("idle-", i)), so);
    if (!sb.ok()) return Fail(std::string(sb.status().message()));
    if (auto done = (*sb)->Exec(first, nullptr); !done.ok()) return Fail(std::string(done.status().message()));
    idle.push_back(std::move(*sb));
  }
  double overhead_kib = 0, guest_kib = 0;
  for (auto& sb : idle) {
    auto stats = api::ControlCall(microvm::VmFilesIn(sb->state_dir()).control_socket, {{"op", "stats"}}, 5000);
    if (!stats.ok()) return Fail(std::string(stats.status().message()));
    const double rss = stats->contains("process") ? Num((*stats)["process"], "vm_rss") : 0;
    const double guest = Num(*stats, "guest_resident_bytes");
    overhead_kib += std::max(0.0, rss - guest) / 1024.0;
    guest_kib += guest / 1024.0;
  }
  idle.clear();
  (void)container::RemoveTree(so.state_root);
  const double n = std::max(1, o.idle);
  overhead_kib /= n;
  guest_kib /= n;
  const double per_gib = overhead_kib + guest_kib > 0 ? (1024.0 * 1024.0) / (overhead_kib + guest_kib) : 0;
  nlohmann::json j{{"create_exec_p50_ms", Percentile(create_exec_ms, 0.5)},
                   {"create_exec_p99_ms", Percentile(create_exec_ms, 0.99)},
                   {"idle_kib", overhead_kib},
                   {"idle_guest_kib", guest_kib},
                   {"per_gib", per_gib},
                   {"runs", o.runs},
                   {"idle_vms", o.idle},
                   {"mem_mib", o.mem_mib},
                   {"layers", o.layers},
                   {"cpl0_cycles_per_round", probe->cycles_per_round()}};
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("microvm create->first exec: p50 %.1f ms  p99 %.1f ms  (%d runs)\n",
                Percentile(create_exec_ms, 0.5), Percentile(create_exec_ms, 0.99), o.runs);
    std::printf("idle microVM: %.0f KiB monitor + %.0f KiB guest-touched RAM -> %.1f per GiB (%d VMs)\n",
                overhead_kib, guest_kib, per_gib, o.idle);
  }
  return 0;
}

}  // namespace

void RegisterMicrovmBenchCommands(CLI::App* bench, CommandRegistry& registry) {
  CLI::App* cmd = bench->add_subcommand(
      "microvm", "microVM sandboxes: create->first exec p50/p99, idle memory, VMs per GiB (skips where CPL0 is emulated)");
  auto o = std::make_shared<MicrovmBenchOptions>();
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
  registry.Add(cmd, [o] { return RunMicrovmBench(*o); });
}

}  // namespace dsec::cmd
