// SPDX-License-Identifier: Apache-2.0
#include "bench/boot_bench.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/percentile.h"
#include "bench/process_runner.h"
#include "nlohmann/json.hpp"

namespace dsec::bench {

namespace {

struct OwnRun {
  double main_ms = 0, first_insn_ms = 0, first_user_ms = 0, shutdown_ms = 0, wall_ms = 0;
  double overhead_mib = 0, peak_mib = 0, private_mib = 0;
};

// The QEMU peer: same ELF through its PVH note, microvm machine, KVM, no
// firmware tables beyond what microvm needs, exit through isa-debug-exit.
std::vector<std::string> QemuArgv(const BootBenchOptions& o) {
  return {o.qemu,
          "-M", "microvm,x-option-roms=off,rtc=off,acpi=off",
          "-accel", "kvm",
          "-cpu", "qemu64",
          "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
          "-m", absl::StrCat(o.mem_mib),
          "-device", "isa-debug-exit,iobase=0xf4,iosize=4",
          "-kernel", o.kernel,
          "-append", "testguest.run=boot"};
}

std::string QemuPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  for (const char* dir : {"/usr/bin/", "/usr/local/bin/", "/bin/"}) {
    std::string p = std::string(dir) + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

nlohmann::json P50P99(const std::vector<double>& v) {
  return {{"p50", Percentile(v, 50)}, {"p99", Percentile(v, 99)}};
}

}  // namespace

int RunBootBench(const BootBenchOptions& o) {
  if (o.runs < 1 || o.concurrency < 1) {
    std::fprintf(stderr, "bench boot: --runs and --concurrency must be at least 1\n");
    return 2;
  }
  if (o.kernel.empty() || ::access(o.kernel.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "bench boot: test guest not found (%s); build it first\n",
                 o.kernel.c_str());
    return 2;
  }
  BootBenchOptions opts = o;
  const bool with_peer = o.peer == "qemu";
  if (!o.peer.empty() && !with_peer) {
    std::fprintf(stderr, "bench boot: unknown peer '%s' (supported: qemu)\n", o.peer.c_str());
    return 2;
  }
  if (with_peer) {
    opts.qemu = QemuPath(o.qemu);
    if (opts.qemu.empty()) {
      std::fprintf(stderr, "bench boot: %s not found (apt-get install qemu-system-x86)\n",
                   o.qemu.c_str());
      return 2;
    }
  }

  char dir_template[] = "/tmp/dsec-bench-boot-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) {
    std::perror("bench boot: mkdtemp");
    return 1;
  }
  const std::string dir = dir_template;

  // Interleave own and peer runs so that drift on a shared machine hits both.
  std::vector<std::vector<std::string>> jobs;
  std::vector<std::string> stats_paths;
  std::vector<bool> is_peer;
  for (int i = 0; i < o.runs; ++i) {
    std::string stats = absl::StrCat(dir, "/run-", i, ".json");
    stats_paths.push_back(stats);
    jobs.push_back({o.monitor, "--kernel", o.kernel, "--mem-mib",
                    absl::StrCat(o.mem_mib), "--console", "none", "--quiet-report",
                    "--cmdline", "testguest.run=boot", "--timeout-ms", "10000", "--stats-json",
                    stats});
    is_peer.push_back(false);
    if (with_peer) {
      jobs.push_back(QemuArgv(opts));
      is_peer.push_back(true);
      stats_paths.push_back("");
    }
  }
  auto results = RunProcesses(jobs, o.concurrency);
  if (!results.ok()) {
    std::fprintf(stderr, "bench boot: %s\n", std::string(results.status().message()).c_str());
    return 1;
  }

  std::vector<OwnRun> own;
  std::vector<double> peer_wall, peer_peak;
  int failures = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const ProcessResult& r = (*results)[i];
    if (is_peer[i]) {
      // isa-debug-exit: QEMU exits with (code << 1) | 1, so 1 for code 0.
      if (!r.ExitedWith(1)) {
        ++failures;
        continue;
      }
      peer_wall.push_back(r.WallMs());
      peer_peak.push_back(static_cast<double>(r.peak_rss_kib) / 1024.0);
      continue;
    }
    std::ifstream in(stats_paths[i]);
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    ::unlink(stats_paths[i].c_str());
    if (!r.ExitedWith(0) || j.is_discarded() || j.value("stop_reason", "") != "guest-shutdown") {
      ++failures;
      continue;
    }
    auto rel = [&](const char* key) {
      int64_t ns = j["monotonic_ns"].value(key, int64_t{0});
      return ns == 0 ? 0.0 : static_cast<double>(ns - r.spawn_ns) / 1e6;
    };
    OwnRun run;
    run.main_ms = rel("main");
    run.first_insn_ms = rel("first_insn");
    run.first_user_ms = rel("first_user");
    run.shutdown_ms = rel("stop");
    run.wall_ms = r.WallMs();
    run.overhead_mib = (static_cast<double>(j.value("vmm_rss_bytes", uint64_t{0})) -
                        static_cast<double>(j.value("guest_resident_bytes", uint64_t{0}))) /
                       (1 << 20);
    run.peak_mib = static_cast<double>(r.peak_rss_kib) / 1024.0;
    run.private_mib = static_cast<double>(j.value("vmm_private_dirty_bytes", uint64_t{0})) / (1 << 20);
    own.push_back(run);
  }
  ::rmdir(dir.c_str());
  if (own.empty()) {
    std::fprintf(stderr, "bench boot: no successful dsec-vmm run (%d failures)\n", failures);
    return 1;
  }

  auto col = [&](double OwnRun::*field) {
    std::vector<double> v;
    for (const auto& r : own) v.push_back(r.*field);
    return v;
  };
  std::vector<double> main_ms = col(&OwnRun::main_ms);
  std::vector<double> first_insn = col(&OwnRun::first_insn_ms);
  std::vector<double> first_user = col(&OwnRun::first_user_ms);
  std::vector<double> shutdown = col(&OwnRun::shutdown_ms);
  std::vector<double> wall = col(&OwnRun::wall_ms);
  std::vector<double> overhead = col(&OwnRun::overhead_mib);
  std::vector<double> peak = col(&OwnRun::peak_mib);
  std::vector<double> private_mib = col(&OwnRun::private_mib);

  nlohmann::json out = {
      {"runs", o.runs},
      {"concurrency", o.concurrency},
      {"failures", failures},
      {"main_ms", P50P99(main_ms)},
      {"first_insn_ms", P50P99(first_insn)},
      {"first_user_ms", P50P99(first_user)},
      {"shutdown_ms", P50P99(shutdown)},
      {"vmm_overhead_mib", Percentile(overhead, 50)},
      {"vmm_private_dirty_mib", Percentile(private_mib, 50)},
  };
  if (with_peer) {
    out["own_wall_ms"] = {{"p50", Percentile(wall, 50)}};
    out["own_peak_mib"] = Percentile(peak, 50);
    out["peer_wall_ms"] = {{"p50", Percentile(peer_wall, 50)}};
    out["peer_peak_mib"] = Percentile(peer_peak, 50);
    if (Percentile(wall, 50) > 0 && !peer_wall.empty()) {
      out["wall_ratio"] = Percentile(peer_wall, 50) / Percentile(wall, 50);
      out["peak_ratio"] = Percentile(peer_peak, 50) / Percentile(peak, 50);
    }
  }
  if (o.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("bench boot: %d runs, concurrency %d, %d failed (test guest, %llu MiB)\n",
                o.runs, o.concurrency, failures, static_cast<unsigned long long>(o.mem_mib));
    std::printf("  process start -> main() (exec, dynamic linking)  p50 %7.2f ms  p99 %7.2f ms\n",
                Percentile(main_ms, 50), Percentile(main_ms, 99));
    std::printf("  process start -> first guest instruction  p50 %7.2f ms  p99 %7.2f ms\n",
                Percentile(first_insn, 50), Percentile(first_insn, 99));
    std::printf("  process start -> first CPL3 instruction   p50 %7.2f ms  p99 %7.2f ms\n",
                Percentile(first_user, 50), Percentile(first_user, 99));
    std::printf("  process start -> guest shutdown           p50 %7.2f ms  p99 %7.2f ms\n",
                Percentile(shutdown, 50), Percentile(shutdown, 99));
    std::printf("  monitor overhead (RSS - guest resident)   p50 %7.2f MiB\n",
                Percentile(overhead, 50));
    std::printf("  monitor private dirty memory (per-VM cost, text shared)  p50 %7.2f MiB\n",
                Percentile(private_mib, 50));
    if (with_peer) {
      std::printf("  whole process, spawn -> exit: dsec-vmm p50 %7.2f ms, qemu microvm p50 %7.2f ms "
                  "(qemu/dsec = %.1fx)\n",
                  Percentile(wall, 50), Percentile(peer_wall, 50),
                  out.value("wall_ratio", 0.0));
      std::printf("  peak RSS: dsec-vmm p50 %7.2f MiB, qemu microvm p50 %7.2f MiB "
                  "(qemu/dsec = %.1fx)\n",
                  Percentile(peak, 50), Percentile(peer_peak, 50), out.value("peak_ratio", 0.0));
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace dsec::bench
