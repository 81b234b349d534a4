// SPDX-License-Identifier: Apache-2.0
#include "bench/snapshot_bench.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/scoped_fd.h"
#include "base/subprocess.h"
#include "bench/percentile.h"
#include "nlohmann/json.hpp"
#include "vmm/monitor/default_paths.h"
#include "vmm/vm/vm.h"

namespace dsec::bench {

namespace {

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

nlohmann::json P50P99(const std::vector<double>& v) {
  return {{"p50", Percentile(v, 50)}, {"p99", Percentile(v, 99)}};
}

// Waits for `pred` up to `ms`, polling every 200 us (the guest's progress
// has no event of its own here).
template <typename Pred>
bool WaitUntil(Pred pred, int64_t ms) {
  const int64_t end = MonotonicNowNs() + ms * 1'000'000;
  while (!pred()) {
    if (MonotonicNowNs() > end) return false;
    ::usleep(200);
  }
  return true;
}

// "Key:   N kB" of /proc/PID/smaps_rollup, in KiB.
uint64_t RollupKib(pid_t pid, const std::string& key) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/smaps_rollup"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::strtoull(line.c_str() + key.size() + 1, nullptr, 10);
  }
  return 0;
}

vm::VmConfig HostConfig() {
  vm::VmConfig host;
  host.console.kind = vm::ConsoleConfig::Kind::kNone;
  host.timeout_ms = 600'000;
  return host;
}

// A restored VM, started, until its vCPU entered the guest; returns the
// times (ms) of the Restore call and of restore-to-first-KVM_RUN.
absl::StatusOr<std::pair<double, double>> RestoreOnce(const std::string& dir,
                                                      std::unique_ptr<vm::Vm>* out) {
  const int64_t t0 = MonotonicNowNs();
  absl::StatusOr<std::unique_ptr<vm::Vm>> vm = vm::Vm::Restore(dir, HostConfig());
  if (!vm.ok()) return vm.status();
  const int64_t t1 = MonotonicNowNs();
  if (absl::Status s = (*vm)->Start(); !s.ok()) return s;
  if (!WaitUntil([&] { return (*vm)->first_run_ns() != 0; }, 10'000)) {
    return absl::DeadlineExceededError("a restored vCPU did not run within 10 s");
  }
  const int64_t t2 = (*vm)->first_run_ns();
  *out = std::move(*vm);
  return std::make_pair(Ms(t1 - t0), Ms(t2 - t0));
}

}  // namespace

int RunSnapshotBench(const SnapshotBenchOptions& o) {
  if (o.runs < 1 || o.clones < 1 || o.mem_mib < 32 || o.touch_mib < 1 ||
      o.touch_mib + 24 > o.mem_mib) {
    std::fprintf(stderr,
                 "bench snapshot: --runs and --clones must be at least 1, --mem-mib at least 32, "
                 "--touch-mib at least 1 and 24 MiB under --mem-mib\n");
    return 2;
  }
  const std::string kernel = o.kernel.empty() ? monitor::DefaultTestGuestPath() : o.kernel;
  const std::string monitor_bin = o.monitor.empty() ? monitor::MonitorBinaryPath() : o.monitor;
  if (kernel.empty() || ::access(monitor_bin.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "bench snapshot: the test guest or dsec-monitor is missing (build with tools/setup.sh)\n");
    return 2;
  }
  std::string root = o.dir;
  bool remove_root = false;
  if (root.empty()) {
    char tmpl[] = "/tmp/dsec-bench-snapshot-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      std::perror("bench snapshot: mkdtemp");
      return 1;
    }
    root = tmpl;
    remove_root = true;
  }
  const std::string dir = root + "/snap";
  if (::mkdir(dir.c_str(), 0700) != 0) {
    std::fprintf(stderr, "bench snapshot: mkdir %s: %s\n", dir.c_str(), std::strerror(errno));
    return 1;
  }
  auto cleanup = [&] {
    if (remove_root) (void)std::system(absl::StrCat("rm -rf '", root, "'").c_str());
  };

  // 1. The source: the test guest writes touch_mib, then idles.
  vm::VmConfig config = HostConfig();
  config.kernel_path = kernel;
  config.mem_mib = static_cast<uint64_t>(o.mem_mib);
  config.cmdline = absl::StrFormat("testguest.run=phases:%d,%d,1,600", o.touch_mib, o.touch_mib);
  absl::StatusOr<std::unique_ptr<vm::Vm>> source = vm::Vm::Create(config);
  if (!source.ok() || !(*source)->Start().ok()) {
    std::fprintf(stderr, "bench snapshot: source VM: %s\n",
                 source.ok() ? "start failed" : std::string(source.status().message()).c_str());
    cleanup();
    return 1;
  }
  auto idle = [&] {
    for (const std::string& m : (*source)->TestMessages()) {
      if (m.rfind("phase name=hot", 0) == 0) return true;
    }
    return false;
  };
  if (!WaitUntil(idle, 120'000) || !(*source)->Pause().ok()) {
    std::fprintf(stderr, "bench snapshot: the source guest did not reach its idle phase\n");
    cleanup();
    return 1;
  }
  ScopedFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  absl::StatusOr<vm::SnapshotResult> snap = (*source)->SaveSnapshot(dfd.get());
  (*source)->RequestStop(vm::StopReason::kHostRequest, "bench: snapshot taken");
  (*source)->Wait();
  source->reset();
  if (!snap.ok()) {
    std::fprintf(stderr, "bench snapshot: %s\n", std::string(snap.status().message()).c_str());
    cleanup();
    return 1;
  }
  const double data_gib = static_cast<double>(snap->memory_bytes_written) / (1ull << 30);
  const double ram_gib = static_cast<double>(snap->memory_bytes) / (1ull << 30);

  // 2. Restores, one at a time (the snapshot's pages are in the page cache:
  // it was just written).
  std::vector<double> restore_ms, first_run_ms;
  for (int i = 0; i < o.runs; ++i) {
    std::unique_ptr<vm::Vm> vm;
    absl::StatusOr<std::pair<double, double>> t = RestoreOnce(dir, &vm);
    if (!t.ok()) {
      std::fprintf(stderr, "bench snapshot: restore: %s\n", std::string(t.status().message()).c_str());
      cleanup();
      return 1;
    }
    restore_ms.push_back(t->first);
    first_run_ms.push_back(t->second);
    vm->RequestStop(vm::StopReason::kHostRequest, "bench");
    vm->Wait();
  }

  // 3. N clones at once, in this process, one after another.
  std::vector<double> clones_ms;
  for (int r = 0; r < std::max(3, o.runs / 4); ++r) {
    std::vector<std::unique_ptr<vm::Vm>> vms(static_cast<size_t>(o.clones));
    const int64_t t0 = MonotonicNowNs();
    for (auto& vm : vms) {
      if (!RestoreOnce(dir, &vm).ok()) {
        std::fprintf(stderr, "bench snapshot: a clone did not restore\n");
        cleanup();
        return 1;
      }
    }
    clones_ms.push_back(Ms(MonotonicNowNs() - t0));
    for (auto& vm : vms) vm->RequestStop(vm::StopReason::kHostRequest, "bench");
    for (auto& vm : vms) vm->Wait();
  }

  // 3b. A diff snapshot of a clone after a second of its idle guest: what
  // an incremental snapshot of a fork costs.
  double diff_ms = 0;
  uint64_t diff_bytes = 0;
  {
    std::unique_ptr<vm::Vm> vm;
    const std::string diff_dir = root + "/diff";
    if (!RestoreOnce(dir, &vm).ok() || ::mkdir(diff_dir.c_str(), 0700) != 0) {
      std::fprintf(stderr, "bench snapshot: the diff's clone did not restore\n");
      cleanup();
      return 1;
    }
    ::sleep(1);
    ScopedFd ddf(::open(diff_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!vm->Pause().ok()) {
      cleanup();
      return 1;
    }
    absl::StatusOr<vm::SnapshotResult> d = vm->SaveSnapshot(ddf.get(), true);
    vm->RequestStop(vm::StopReason::kHostRequest, "bench");
    vm->Wait();
    if (!d.ok()) {
      std::fprintf(stderr, "bench snapshot: diff: %s\n", std::string(d.status().message()).c_str());
      cleanup();
      return 1;
    }
    diff_ms = Ms(d->total_ns);
    diff_bytes = d->memory_bytes_written;
  }

  // 4. Host memory per idle clone: N dsec-monitor processes restored from
  // the snapshot, idle for a second.
  std::vector<Subprocess> procs;
  for (int i = 0; i < o.clones; ++i) {
    SpawnOptions spawn;
    spawn.argv = {monitor_bin, "--restore", dir, "--console", "none", "--timeout-ms", "120000",
                  "--quiet-report"};
    absl::StatusOr<Subprocess> p = Subprocess::Spawn(spawn);
    if (!p.ok()) {
      std::fprintf(stderr, "bench snapshot: %s\n", std::string(p.status().message()).c_str());
      cleanup();
      return 1;
    }
    procs.push_back(std::move(*p));
  }
  ::sleep(2);
  uint64_t private_kib = 0, pss_kib = 0, rss_kib = 0;
  for (Subprocess& p : procs) {
    private_kib += RollupKib(p.pid(), "Private_Dirty");
    pss_kib += RollupKib(p.pid(), "Pss");
    rss_kib += RollupKib(p.pid(), "Rss");
  }
  int alive = 0;
  for (Subprocess& p : procs) {
    if (::kill(p.pid(), 0) == 0) ++alive;
    (void)p.Signal(SIGTERM);
  }
  for (Subprocess& p : procs) (void)p.Wait();
  const double n = static_cast<double>(o.clones);

  nlohmann::json j = {
      {"mem_mib", o.mem_mib},
      {"touch_mib", o.touch_mib},
      {"snapshot",
       {{"total_ms", Ms(snap->total_ns)},
        {"capture_ms", Ms(snap->capture_ns)},
        {"memory_ms", Ms(snap->memory_ns)},
        {"memory_bytes", snap->memory_bytes},
        {"data_bytes", snap->memory_bytes_written},
        {"ms_per_gib_data", data_gib > 0 ? Ms(snap->memory_ns) / data_gib : 0.0},
        {"ms_per_gib_ram", Ms(snap->total_ns) / ram_gib}}},
      {"restore_ms", P50P99(restore_ms)},
      {"diff_after_1s_idle", {{"total_ms", diff_ms}, {"data_bytes", diff_bytes}}},
      {"restore_to_first_run_ms", P50P99(first_run_ms)},
      {"clones", o.clones},
      {"clones_restore_ms", P50P99(clones_ms)},
      {"idle_clone",
       {{"processes_alive", alive},
        {"private_dirty_kib", private_kib / n},
        {"pss_kib", pss_kib / n},
        {"rss_kib", rss_kib / n}}},
  };
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("snapshot of a %d MiB test guest (%d MiB written by it): %.1f ms (state %.2f ms, "
                "memory %.1f ms for %.1f MiB of data: %.0f ms/GiB of data, %.0f ms/GiB of RAM)\n",
                o.mem_mib, o.touch_mib, Ms(snap->total_ns), Ms(snap->capture_ns),
                Ms(snap->memory_ns), snap->memory_bytes_written / 1048576.0,
                j["snapshot"]["ms_per_gib_data"].get<double>(),
                j["snapshot"]["ms_per_gib_ram"].get<double>());
    std::printf("restore (warm page cache), %d runs: Vm::Restore p50 %.2f ms p99 %.2f ms; to the "
                "first KVM_RUN p50 %.2f ms p99 %.2f ms\n",
                o.runs, Percentile(restore_ms, 50), Percentile(restore_ms, 99),
                Percentile(first_run_ms, 50), Percentile(first_run_ms, 99));
    std::printf("%d clones restored one after another in one process: p50 %.1f ms p99 %.1f ms\n",
                o.clones, Percentile(clones_ms, 50), Percentile(clones_ms, 99));
    std::printf("diff snapshot of a clone after 1 s of its idle guest: %.1f ms, %.0f KiB of data\n",
                diff_ms, diff_bytes / 1024.0);
    std::printf("idle clone (%d dsec-monitor --restore processes, %d alive after 2 s): private "
                "dirty %.0f KiB, PSS %.0f KiB, RSS %.0f KiB each (RSS counts the snapshot's "
                "page-cache pages every clone shares)\n",
                o.clones, alive, private_kib / n, pss_kib / n, rss_kib / n);
  }
  cleanup();
  return alive == o.clones ? 0 : 1;
}

}  // namespace dsec::bench
