// SPDX-License-Identifier: Apache-2.0
#include "bench/microvm_bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/percentile.h"
#include "nlohmann/json.hpp"
#include "sandbox/container/state_dir.h"
#include "sandbox/microvm/cpl0_probe.h"
#include "sandbox/microvm/microvm_sandbox.h"
#include "sandbox/microvm/vm_launcher.h"
#include "sandbox/microvm/vm_process.h"
#include "vmm/api/control.h"
#include "vmm/monitor/default_paths.h"

namespace dsec::bench {

namespace {

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

}  // namespace

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
  nlohmann::json j{{"create_exec_p50_ms", Percentile(create_exec_ms, 50)},
                   {"create_exec_p99_ms", Percentile(create_exec_ms, 99)},
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
                Percentile(create_exec_ms, 50), Percentile(create_exec_ms, 99), o.runs);
    std::printf("idle microVM: %.0f KiB monitor + %.0f KiB guest-touched RAM -> %.1f per GiB (%d VMs)\n",
                overhead_kib, guest_kib, per_gib, o.idle);
  }
  return 0;
}

}  // namespace dsec::bench
