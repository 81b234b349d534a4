// SPDX-License-Identifier: Apache-2.0
#include "bench/snapshot_bench.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
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
#include "base/status.h"
#include "base/subprocess.h"
#include "bench/percentile.h"
#include "nlohmann/json.hpp"
#include "vmm/monitor/default_paths.h"
#include "vmm/vm/vm.h"

namespace dsec::bench {

namespace {

// A QMP client (QEMU's JSON monitor) over its unix socket: one command at a
// time, events skipped.
class Qmp {
 public:
  static absl::StatusOr<Qmp> Connect(const std::string& path, int64_t timeout_ms) {
    const int64_t end = MonotonicNowNs() + timeout_ms * 1'000'000;
    for (;;) {
      ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
      if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
        Qmp q(std::move(fd));
        DSEC_RETURN_IF_ERROR(q.ReadLine().status());  // the greeting
        DSEC_RETURN_IF_ERROR(q.Command("qmp_capabilities").status());
        return q;
      }
      if (MonotonicNowNs() > end) return absl::DeadlineExceededError("QMP socket " + path);
      ::usleep(200);
    }
  }
  absl::StatusOr<nlohmann::json> Command(const std::string& name,
                                         nlohmann::json args = nullptr) {
    nlohmann::json c = {{"execute", name}};
    if (!args.is_null()) c["arguments"] = std::move(args);
    const std::string line = c.dump() + "\n";
    if (::write(fd_.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      return absl::UnavailableError("QMP write");
    }
    for (;;) {
      DSEC_ASSIGN_OR_RETURN(nlohmann::json j, ReadLine());
      if (j.contains("return")) return j["return"];
      if (j.contains("error")) return absl::InternalError("QMP " + name + ": " + j["error"].dump());
    }
  }

 private:
  explicit Qmp(ScopedFd fd) : fd_(std::move(fd)) {}
  absl::StatusOr<nlohmann::json> ReadLine() {
    for (;;) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        nlohmann::json j = nlohmann::json::parse(buf_.substr(0, nl), nullptr, false);
        buf_.erase(0, nl + 1);
        if (j.is_discarded()) return absl::InternalError("QMP: not JSON");
        return j;
      }
      char chunk[4096];
      const ssize_t n = ::read(fd_.get(), chunk, sizeof(chunk));
      if (n <= 0) return absl::UnavailableError("QMP: connection closed");
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }
  ScopedFd fd_;
  std::string buf_;
};

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

// `name` if it is a path, else its place in the usual bin directories.
std::string FindProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  for (const char* dir : {"/usr/bin/", "/usr/local/bin/", "/bin/"}) {
    std::string p = std::string(dir) + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
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
                                                      std::unique_ptr<vm::Vm>* out,
                                                      const vm::RestoreOptions& options = {}) {
  const int64_t t0 = MonotonicNowNs();
  absl::StatusOr<std::unique_ptr<vm::Vm>> vm = vm::Vm::Restore(dir, HostConfig(), options);
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

  // 2b. Lazy restores (userfaultfd): the first one runs for 200 ms and
  // records the pages it touched; the next ones prefetch them. Per run:
  // the Restore call (the prefetch copies included), to the first KVM_RUN,
  // and the faults in the guest's first 200 ms.
  std::vector<double> lazy_restore_ms, lazy_first_run_ms, lazy_faults;
  double cold_faults = 0;
  uint64_t prefetch_pages = 0;
  std::string lazy_error;
  {
    vm::RestoreOptions lazy;
    lazy.lazy = true;
    std::unique_ptr<vm::Vm> vm;
    absl::StatusOr<std::pair<double, double>> t = RestoreOnce(dir, &vm, lazy);
    if (!t.ok()) {
      lazy_error = std::string(t.status().message());
    } else {
      ::usleep(200'000);
      std::vector<snapshot::Extent> touched = vm->TouchedPages();
      vm->RequestStop(vm::StopReason::kHostRequest, "bench");
      cold_faults = static_cast<double>(vm->Wait().lazy_faults);
      for (const snapshot::Extent& e : touched) prefetch_pages += e.length / 4096;
      lazy.prefetch = std::move(touched);
      for (int i = 0; i < o.runs && lazy_error.empty(); ++i) {
        t = RestoreOnce(dir, &vm, lazy);
        if (!t.ok()) {
          lazy_error = std::string(t.status().message());
          break;
        }
        lazy_restore_ms.push_back(t->first);
        lazy_first_run_ms.push_back(t->second);
        ::usleep(200'000);
        vm->RequestStop(vm::StopReason::kHostRequest, "bench");
        lazy_faults.push_back(static_cast<double>(vm->Wait().lazy_faults));
      }
    }
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

  // 5. Restores as processes: `dsec-monitor --restore` from spawn to its
  // vCPU's first KVM_RUN (its stats file), what the QEMU peer is compared
  // with.
  std::vector<double> process_ms;
  for (int i = 0; i < o.peer_runs; ++i) {
    const std::string stats = root + "/stats.json";
    SpawnOptions spawn;
    spawn.argv = {monitor_bin, "--restore", dir, "--console", "none", "--timeout-ms", "200",
                  "--quiet-report", "--stats-json", stats};
    const int64_t t0 = MonotonicNowNs();
    absl::StatusOr<Subprocess> p = Subprocess::Spawn(spawn);
    if (!p.ok() || !p->Wait().ok()) {
      std::fprintf(stderr, "bench snapshot: dsec-monitor --restore did not run\n");
      cleanup();
      return 1;
    }
    std::ifstream in(stats);
    nlohmann::json s = nlohmann::json::parse(in, nullptr, false);
    const int64_t first_run = s.is_object() ? s["monotonic_ns"].value("first_run", int64_t{0}) : 0;
    if (first_run <= t0) {
      std::fprintf(stderr, "bench snapshot: no first_run in %s\n", stats.c_str());
      cleanup();
      return 1;
    }
    process_ms.push_back(Ms(first_run - t0));
  }

  // 6. The peer: QEMU (microvm machine, KVM) runs the same guest, saves it
  // by migration to a file, and restores it with -incoming, spawn to
  // "running" (QMP query-status; a VM saved stopped is resumed with cont).
  nlohmann::json peer = nullptr;
  if (o.peer == "qemu") {
    const std::string qemu = FindProgram(o.qemu);
    if (qemu.empty()) {
      std::fprintf(stderr, "bench snapshot: %s not found\n", o.qemu.c_str());
      cleanup();
      return 2;
    }
    const std::string qsock = root + "/qmp.sock", qfile = root + "/qemu.state";
    std::vector<std::string> argv = {
        qemu, "-M", "microvm,x-option-roms=off,rtc=off,acpi=off", "-accel", "kvm", "-cpu",
        "qemu64", "-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-m",
        absl::StrCat(o.mem_mib), "-kernel", kernel, "-append",
        absl::StrFormat("testguest.run=phases:%d,%d,1,600", o.touch_mib, o.touch_mib), "-serial",
        "none", "-monitor", "none", "-qmp", absl::StrCat("unix:", qsock, ",server=on,wait=off")};
    auto fail = [&](const std::string& what) {
      std::fprintf(stderr, "bench snapshot: qemu: %s\n", what.c_str());
      cleanup();
      return 1;
    };
    double qsave_ms = 0;
    {
      SpawnOptions spawn;
      spawn.argv = argv;
      absl::StatusOr<Subprocess> q = Subprocess::Spawn(spawn);
      if (!q.ok()) return fail(std::string(q.status().message()));
      absl::StatusOr<Qmp> qmp = Qmp::Connect(qsock, 10'000);
      if (!qmp.ok()) return fail(std::string(qmp.status().message()));
      // No test device under QEMU: the guest's writes are given 3 s (they
      // take well under one at CPL3 with KVM).
      ::sleep(3);
      if (!qmp->Command("stop").ok()) return fail("stop");
      const int64_t t0 = MonotonicNowNs();
      if (!qmp->Command("migrate", {{"uri", "exec:cat > " + qfile}}).ok()) return fail("migrate");
      for (;;) {
        absl::StatusOr<nlohmann::json> st = qmp->Command("query-migrate");
        if (!st.ok()) return fail("query-migrate");
        const std::string status = st->value("status", "");
        if (status == "completed") break;
        if (status == "failed") return fail("migration failed");
        if (MonotonicNowNs() - t0 > 120'000'000'000) return fail("migration did not end");
        ::usleep(1000);
      }
      qsave_ms = Ms(MonotonicNowNs() - t0);
      (void)qmp->Command("quit");
      (void)q->Wait(10'000);
    }
    std::vector<double> qrestore_ms;
    for (int i = 0; i < o.peer_runs; ++i) {
      ::unlink(qsock.c_str());
      SpawnOptions spawn;
      spawn.argv = argv;
      spawn.argv.push_back("-incoming");
      spawn.argv.push_back("exec:cat " + qfile);
      const int64_t t0 = MonotonicNowNs();
      absl::StatusOr<Subprocess> q = Subprocess::Spawn(spawn);
      if (!q.ok()) return fail(std::string(q.status().message()));
      absl::StatusOr<Qmp> qmp = Qmp::Connect(qsock, 10'000);
      if (!qmp.ok()) return fail(std::string(qmp.status().message()));
      for (;;) {
        absl::StatusOr<nlohmann::json> st = qmp->Command("query-status");
        if (!st.ok()) return fail("query-status");
        const std::string status = st->value("status", "");
        if (status == "running") break;
        if (status == "paused" || status == "postmigrate") (void)qmp->Command("cont");
        if (MonotonicNowNs() - t0 > 60'000'000'000) return fail("the restore did not run");
        ::usleep(200);
      }
      qrestore_ms.push_back(Ms(MonotonicNowNs() - t0));
      (void)qmp->Command("quit");
      (void)q->Wait(10'000);
    }
    struct stat st;
    const uint64_t qbytes = ::stat(qfile.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    peer = {{"name", "qemu"},
            {"save_ms", qsave_ms},
            {"state_bytes", qbytes},
            {"restore_to_running_ms", P50P99(qrestore_ms)},
            {"save_ratio", qsave_ms / Ms(snap->total_ns)},
            {"restore_ratio", Percentile(qrestore_ms, 50) / Percentile(process_ms, 50)}};
  }

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
      {"lazy",
       lazy_error.empty()
           ? nlohmann::json{{"first_restore_faults_in_200ms", cold_faults},
                            {"prefetched_pages", prefetch_pages},
                            {"restore_ms", P50P99(lazy_restore_ms)},
                            {"restore_to_first_run_ms", P50P99(lazy_first_run_ms)},
                            {"faults_in_200ms", P50P99(lazy_faults)}}
           : nlohmann::json{{"error", lazy_error}}},
      {"process_restore_to_first_run_ms", P50P99(process_ms)},
      {"peer", peer},
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
    if (lazy_error.empty()) {
      std::printf("lazy restore (userfaultfd), prefetching the %llu pages the first one touched "
                  "(%.0f faults in its first 200 ms), %d runs: Vm::Restore p50 %.2f ms p99 %.2f ms; "
                  "to the first KVM_RUN p50 %.2f ms p99 %.2f ms; faults in the first 200 ms p50 %.0f\n",
                  static_cast<unsigned long long>(prefetch_pages), cold_faults, o.runs,
                  Percentile(lazy_restore_ms, 50), Percentile(lazy_restore_ms, 99),
                  Percentile(lazy_first_run_ms, 50), Percentile(lazy_first_run_ms, 99),
                  Percentile(lazy_faults, 50));
    } else {
      std::printf("lazy restore (userfaultfd): not measured: %s\n", lazy_error.c_str());
    }
    std::printf("%d clones restored one after another in one process: p50 %.1f ms p99 %.1f ms\n",
                o.clones, Percentile(clones_ms, 50), Percentile(clones_ms, 99));
    std::printf("diff snapshot of a clone after 1 s of its idle guest: %.1f ms, %.0f KiB of data\n",
                diff_ms, diff_bytes / 1024.0);
    std::printf("dsec-monitor --restore, spawn to the first KVM_RUN, %d runs: p50 %.2f ms p99 %.2f ms\n",
                o.peer_runs, Percentile(process_ms, 50), Percentile(process_ms, 99));
    if (!peer.is_null()) {
      std::printf("QEMU (same guest, migration to a file): save %.1f ms (%.1f MiB of state), restore "
                  "spawn to running p50 %.1f ms p99 %.1f ms; QEMU/dsec-vmm: save %.2fx, restore "
                  "%.1fx\n",
                  peer["save_ms"].get<double>(), peer["state_bytes"].get<uint64_t>() / 1048576.0,
                  peer["restore_to_running_ms"]["p50"].get<double>(),
                  peer["restore_to_running_ms"]["p99"].get<double>(),
                  peer["save_ratio"].get<double>(), peer["restore_ratio"].get<double>());
    }
    std::printf("idle clone (%d dsec-monitor --restore processes, %d alive after 2 s): private "
                "dirty %.0f KiB, PSS %.0f KiB, RSS %.0f KiB each (RSS counts the snapshot's "
                "page-cache pages every clone shares)\n",
                o.clones, alive, private_kib / n, pss_kib / n, rss_kib / n);
  }
  cleanup();
  return alive == o.clones ? 0 : 1;
}

}  // namespace dsec::bench
