// SPDX-License-Identifier: Apache-2.0
#include "bench/reclaim_bench.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "balloon/host_memory.h"
#include "balloon/proc_memory.h"
#include "balloon/zram_swap.h"
#include "base/clock.h"
#include "nlohmann/json.hpp"
#include "base/file_io.h"
#include "base/mmap.h"
#include "base/scoped_fd.h"
#include "base/status.h"
#include "base/subprocess.h"

namespace dsec::bench {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiBd = 1024.0 * 1024.0;

// A whole file, "" when unreadable (a monitor that wrote nothing).
std::string ReadText(const std::string& path) { return ReadFile(path).value_or(""); }

// Guest RAM of monitor `pid` resident in the host: mincore over its
// guest-RAM memfds, reopened through /proc/PID/fd. Counts pages that are in
// memory but not mapped (the pagemap sampler unmaps a few per chunk), which
// RssShmem misses; swapped-out and released pages are not resident.
absl::StatusOr<uint64_t> GuestRamResident(pid_t pid) {
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return ErrnoToStatus(absl::StrCat("opendir ", dir));
  uint64_t resident = 0;
  int found = 0;
  std::vector<unsigned char> vec;
  while (dirent* e = ::readdir(d.get())) {
    if (e->d_name[0] == '.') continue;
    const std::string link = absl::StrCat(dir, "/", e->d_name);
    char target[256];
    ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (!absl::StartsWith(target, "/memfd:dsec-guest-ram-")) continue;
    ScopedFd fd(::open(link.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) continue;
    struct stat st;
    if (::fstat(fd.get(), &st) != 0 || st.st_size <= 0) continue;
    const size_t size = static_cast<size_t>(st.st_size);
    auto map = Mmap::File(fd.get(), size, PROT_READ, MAP_SHARED);
    if (!map.ok()) continue;
    vec.resize((size + 4095) / 4096);
    if (::mincore(map->data(), size, vec.data()) == 0) {
      for (unsigned char v : vec) resident += (v & 1) ? 4096 : 0;
      ++found;
    }
  }
  if (found == 0) return absl::NotFoundError("no guest-RAM memfd");
  return resident;
}

// What zram swap devices hold now (all of them in /proc/swaps: swapped guest
// pages are counted wherever they went).
uint64_t ZramHeldBytes() {
  uint64_t total = 0;
  for (int id : ZramSwapIds(ReadText("/proc/swaps"))) {
    auto s = balloon::ParseZramMmStat(ReadText(absl::StrCat("/sys/block/zram", id, "/mm_stat")));
    if (s.ok()) total += s->mem_used_total;
  }
  return total;
}

struct Child {
  Subprocess process;                     // a monitor; killed and reaped if left running
  std::optional<SubprocessResult> ended;  // once reaped
  std::string out, err, stats;
};

struct ModeResult {
  std::string mode;
  bool available = true;
  std::string why;
  int runs = 0;
  double gib_s = 0;      // RssAnon + RssFile + resident guest RAM + zram
  double gib_s_rss = 0;  // VmRSS + zram (for comparison)
  double peak_bytes = 0;
  double hot_ms = 0;     // mean over VMs
  double wall_s = 0;
  double balloon_released_bytes = 0;
  double reclaimed_bytes = 0;
  double refault_bytes = 0;
  double zram_peak_bytes = 0;
  int failures = 0;
  std::string first_error;
};

std::vector<std::string> ModeArgs(const std::string& mode) {
  if (mode == "balloon") return {"--balloon", "--reclaim", "balloon"};
  if (mode == "pageout") return {"--reclaim", "pageout"};
  if (mode == "both") return {"--balloon", "--reclaim", "both"};
  return {};
}

void KillAll(std::vector<Child>& children, int sig) {
  for (Child& c : children) (void)c.process.Signal(sig);
}

void ReapAll(std::vector<Child>& children) {
  for (Child& c : children) {
    if (!c.process.running()) continue;
    auto r = c.process.Wait();
    if (r.ok()) c.ended = std::move(*r);
  }
}

// One mode, one round: K monitors at once, sampled until all exited.
// Returns false when interrupted by a signal on `sigfd`.
bool RunMode(const ReclaimBenchOptions& o, const std::string& tmp, const std::string& mode,
             int round, int sigfd, ModeResult& res) {
  const std::string workload =
      absl::StrCat("phases:", o.touch_mib, ",", o.hot_mib, ",", o.hot_passes, ",", o.idle_s);
  std::vector<Child> children(static_cast<size_t>(o.vms));
  const uint64_t zram_base = ZramHeldBytes();
  const int64_t t0 = MonotonicNowNs();
  for (int i = 0; i < o.vms; ++i) {
    Child& c = children[static_cast<size_t>(i)];
    const std::string base = absl::StrCat(tmp, "/", mode, "-", round, "-", i);
    c.out = base + ".out";
    c.err = base + ".err";
    c.stats = base + ".json";
    std::vector<std::string> args = {o.monitor, "--kernel", o.kernel, "--mem-mib",
                                     absl::StrCat(o.mem_mib), "--timeout-ms",
                                     absl::StrCat(o.timeout_ms), "--stats-json", c.stats,
                                     "--cmdline", "console=ttyS0 testguest.run=" + workload};
    for (const std::string& a : ModeArgs(mode)) args.push_back(a);
    if (mode != "off") args.insert(args.end(), o.vm_args.begin(), o.vm_args.end());
    SpawnOptions spawn;
    spawn.argv = std::move(args);
    spawn.out = Stdio::File(c.out);
    spawn.err = Stdio::File(c.err);
    auto process = Subprocess::Spawn(spawn);
    if (!process.ok()) {
      res.failures++;
      res.first_error = std::string(process.status().message());
      break;
    }
    c.process = std::move(*process);
  }
  std::vector<MemSample> samples, rss_samples;
  bool interrupted = false;
  for (;;) {
    MemSample s{MonotonicNowNs(), 0}, r{s.t_ns, 0};
    int alive = 0;
    for (Child& c : children) {
      if (!c.process.running()) continue;
      auto polled = c.process.Poll();
      if (!polled.ok()) {
        c.process = Subprocess();  // cannot be waited for: no result
        continue;
      }
      if (polled->has_value()) {
        c.ended = std::move(**polled);
        continue;
      }
      ++alive;
      auto pm = balloon::ReadProcessMemory(c.process.pid());
      if (!pm.ok()) continue;
      auto ram = GuestRamResident(c.process.pid());
      s.bytes += pm->rss_anon + pm->rss_file + (ram.ok() ? *ram : pm->rss_shmem);
      r.bytes += pm->vm_rss;
    }
    const uint64_t zram_now = ZramHeldBytes();
    const uint64_t zram = zram_now > zram_base ? zram_now - zram_base : 0;
    res.zram_peak_bytes = std::max(res.zram_peak_bytes, static_cast<double>(zram));
    s.bytes += zram;
    r.bytes += zram;
    samples.push_back(s);
    rss_samples.push_back(r);
    if (alive == 0) break;
    pollfd p{sigfd, POLLIN, 0};
    int n = ::poll(&p, 1, o.sample_ms);
    if (n > 0 && (p.revents & POLLIN)) {
      signalfd_siginfo info;
      (void)::read(sigfd, &info, sizeof(info));
      interrupted = true;
      break;
    }
  }
  if (interrupted) {
    KillAll(children, SIGTERM);
    ReapAll(children);
    return false;
  }
  const double wall_s = static_cast<double>(MonotonicNowNs() - t0) / 1e9;
  // Per-VM results.
  double hot_sum = 0;
  int hot_n = 0;
  for (size_t i = 0; i < children.size(); ++i) {
    const Child& c = children[i];
    std::string error;
    if (!c.ended) continue;
    const int status = c.ended->wait_status;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      error = absl::StrFormat("%s vm %d: exit status 0x%x: %s", mode, i, status,
                              ReadText(c.err).substr(0, 400));
    }
    std::optional<uint64_t> hot;
    std::istringstream out(ReadText(c.out));
    for (std::string line; std::getline(out, line);) {
      if (auto ms = ParsePhaseMs(line, "hot")) hot = ms;
    }
    if (error.empty() && !hot) error = absl::StrFormat("%s vm %d: no 'phase name=hot' line", mode, i);
    if (!error.empty()) {
      if (res.failures++ == 0) res.first_error = error;
      continue;
    }
    hot_sum += static_cast<double>(*hot);
    ++hot_n;
    nlohmann::json st = nlohmann::json::parse(ReadText(c.stats), nullptr, false);
    if (!st.is_discarded() && st.contains("reclaim") && st["reclaim"].is_object() &&
        st["reclaim"]["vm"].is_object()) {
      const nlohmann::json& v = st["reclaim"]["vm"];
      res.balloon_released_bytes += v.value("balloon_released_bytes", 0.0);
      res.reclaimed_bytes += v.value("reclaimed_bytes", 0.0);
      res.refault_bytes += v.value("refault_bytes", 0.0);
    }
  }
  res.runs++;
  res.gib_s += IntegrateGiBSeconds(samples);
  res.gib_s_rss += IntegrateGiBSeconds(rss_samples);
  res.peak_bytes += static_cast<double>(PeakBytes(samples));
  res.hot_ms += hot_n > 0 ? hot_sum / hot_n : 0;
  res.wall_s += wall_s;
  return true;
}

void Average(ModeResult& r) {
  if (r.runs <= 1) return;
  const double n = r.runs;
  for (double* v : {&r.gib_s, &r.gib_s_rss, &r.peak_bytes, &r.hot_ms, &r.wall_s,
                    &r.balloon_released_bytes, &r.reclaimed_bytes, &r.refault_bytes}) {
    *v /= n;
  }
}

}  // namespace

double IntegrateGiBSeconds(std::span<const MemSample> samples) {
  double sum = 0;
  for (size_t i = 1; i < samples.size(); ++i) {
    const double dt = static_cast<double>(samples[i].t_ns - samples[i - 1].t_ns) / 1e9;
    if (dt <= 0) continue;
    sum += dt * (static_cast<double>(samples[i].bytes) + static_cast<double>(samples[i - 1].bytes)) /
           2.0 / kGiB;
  }
  return sum;
}

uint64_t PeakBytes(std::span<const MemSample> samples) {
  uint64_t peak = 0;
  for (const MemSample& s : samples) peak = std::max(peak, s.bytes);
  return peak;
}

double Reduction(double mode, double off) { return off > 0 ? 1.0 - mode / off : 0.0; }
double Slowdown(double mode_ms, double off_ms) { return off_ms > 0 ? mode_ms / off_ms - 1.0 : 0.0; }

std::optional<uint64_t> ParsePhaseMs(std::string_view line, std::string_view phase) {
  const std::string key = "phase name=" + std::string(phase) + " ms=";
  const size_t at = line.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(at + key.size());
  size_t end = 0;
  while (end < rest.size() && rest[end] >= '0' && rest[end] <= '9') ++end;
  uint64_t v = 0;
  if (end == 0 || (end < rest.size() && rest[end] != ' ' && rest[end] != '\r') ||
      !absl::SimpleAtoi(absl::string_view(rest.data(), end), &v)) {
    return std::nullopt;
  }
  return v;
}

std::vector<int> ZramSwapIds(std::string_view proc_swaps) {
  std::vector<int> ids;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(proc_swaps.data(), proc_swaps.size()), '\n')) {
    constexpr absl::string_view kPrefix = "/dev/zram";
    if (!absl::StartsWith(line, kPrefix)) continue;
    absl::string_view rest = line.substr(kPrefix.size());
    size_t end = 0;
    while (end < rest.size() && rest[end] >= '0' && rest[end] <= '9') ++end;
    int id = 0;
    if (end > 0 && (end == rest.size() || rest[end] == ' ' || rest[end] == '\t') &&
        absl::SimpleAtoi(rest.substr(0, end), &id)) {
      ids.push_back(id);
    }
  }
  return ids;
}

int RunReclaimBench(const ReclaimBenchOptions& o) {
  if (o.monitor.empty() || o.kernel.empty()) {
    std::fprintf(stderr, "bench reclaim: the monitor binary (dsec-monitor) or the test guest was not found\n");
    return 2;
  }
  if (o.hot_mib >= o.touch_mib || o.touch_mib + 64 > o.mem_mib) {
    std::fprintf(stderr, "bench reclaim: need hot-mib < touch-mib <= mem-mib - 64\n");
    return 2;
  }
  for (const std::string& m : o.modes) {
    if (m != "off" && m != "balloon" && m != "pageout" && m != "both") {
      std::fprintf(stderr, "bench reclaim: unknown mode '%s'\n", m.c_str());
      return 2;
    }
  }
  // SIGINT/SIGTERM: stop the monitors, remove the zram device, exit 130.
  sigset_t sigs, old;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, &old);
  struct MaskRestore {
    sigset_t old;
    ~MaskRestore() { pthread_sigmask(SIG_SETMASK, &old, nullptr); }
  } restore{old};
  ScopedFd sigfd(::signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!sigfd.valid()) {
    std::fprintf(stderr, "bench reclaim: signalfd: %s\n", std::strerror(errno));
    return 1;
  }
  char tmpl[] = "/tmp/dsec-reclaim-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    std::fprintf(stderr, "bench reclaim: mkdtemp: %s\n", std::strerror(errno));
    return 1;
  }
  const std::string tmp = tmpl;
  struct TmpRemove {
    std::string dir;
    ~TmpRemove() {
      if (std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir); d) {
        while (dirent* e = ::readdir(d.get())) {
          if (e->d_name[0] != '.') ::unlink(absl::StrCat(dir, "/", e->d_name).c_str());
        }
      }
      ::rmdir(dir.c_str());
    }
  } tmp_remove{tmp};

  // Swap for pageout: the host's, or a zram device of our own (removed by
  // its destructor on every return path, including a signal).
  std::unique_ptr<balloon::ZramSwap> zram;
  std::string swap_note;
  std::string pageout_unavailable;
  auto swaps = balloon::ReadSwaps();
  if (swaps.ok() && swaps->devices > 0) {
    swap_note = absl::StrCat("host swap (", swaps->devices, " device(s))");
  } else {
    auto z = balloon::ZramSwap::Create(static_cast<uint64_t>(o.vms) * o.mem_mib << 20);
    if (z.ok()) {
      zram = std::move(*z);
      swap_note = absl::StrCat("own zram swap ", zram->device());
    } else {
      pageout_unavailable = z.status().ToString();
    }
  }

  std::map<std::string, ModeResult> results;
  for (const std::string& m : o.modes) {
    results[m].mode = m;
    if ((m == "pageout" || m == "both") && !pageout_unavailable.empty()) {
      results[m].available = false;
      results[m].why = absl::StrCat("no swap and no zram: ", pageout_unavailable);
    }
  }
  for (int round = 0; round < o.rounds; ++round) {
    for (const std::string& m : o.modes) {
      ModeResult& r = results[m];
      if (!r.available) continue;
      if (!o.json) std::fprintf(stderr, "bench reclaim: round %d mode %s ...\n", round + 1, m.c_str());
      if (!RunMode(o, tmp, m, round, sigfd.get(), r)) {
        std::fprintf(stderr, "bench reclaim: interrupted; monitors stopped%s\n",
                     zram ? ", zram removed" : "");
        return 130;
      }
    }
  }
  int failures = 0;
  for (auto& [m, r] : results) {
    Average(r);
    failures += r.failures;
  }
  const std::string workload =
      absl::StrCat("phases:", o.touch_mib, ",", o.hot_mib, ",", o.hot_passes, ",", o.idle_s);
  const ModeResult* off = results.count("off") ? &results["off"] : nullptr;
  auto red = [&](const ModeResult& r) { return off ? Reduction(r.gib_s, off->gib_s) : 0.0; };
  auto slow = [&](const ModeResult& r) { return off ? Slowdown(r.hot_ms, off->hot_ms) : 0.0; };
  if (o.json) {
    nlohmann::json j{{"vms", o.vms},       {"mem_mib", o.mem_mib}, {"workload", workload},
                     {"rounds", o.rounds}, {"sample_ms", o.sample_ms}, {"swap", swap_note},
                     {"failures", failures}};
    if (!pageout_unavailable.empty()) j["pageout_unavailable"] = pageout_unavailable;
    for (const auto& [m, r] : results) {
      if (!r.available || r.runs == 0) {
        j["gib_s_" + m] = nullptr;
        continue;
      }
      j["gib_s_" + m] = r.gib_s;
      j["gib_s_rss_" + m] = r.gib_s_rss;
      j["peak_mib_" + m] = r.peak_bytes / kMiBd;
      j["hot_ms_" + m] = r.hot_ms;
      j["wall_s_" + m] = r.wall_s;
      j["balloon_released_mib_" + m] = r.balloon_released_bytes / kMiBd;
      j["pageout_mib_" + m] = r.reclaimed_bytes / kMiBd;
      j["refault_mib_" + m] = r.refault_bytes / kMiBd;
      j["zram_peak_mib_" + m] = r.zram_peak_bytes / kMiBd;
      if (m != "off") {
        j["reduction_" + m] = red(r);
        j["slowdown_" + m] = slow(r);
      }
    }
    const bool both_ok = results.count("both") && results["both"].available && results["both"].runs;
    j["reduction"] = both_ok && off ? nlohmann::json(red(results["both"])) : nlohmann::json(nullptr);
    j["slowdown"] = both_ok && off ? nlohmann::json(slow(results["both"])) : nlohmann::json(nullptr);
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("bench reclaim: %d VMs x %s, %d MiB RAM each, %d round(s), sampled every %d ms; "
                "swap: %s\n",
                o.vms, workload.c_str(), o.mem_mib, o.rounds, o.sample_ms,
                swap_note.empty() ? "none" : swap_note.c_str());
    std::printf("memory = monitors' RssAnon + RssFile + resident guest RAM (memfd mincore) + "
                "zram mem_used_total\n");
    std::printf("%-8s %9s %9s %9s %8s %8s %11s %11s %11s %10s %9s\n", "mode", "GiB*s",
                "(VmRSS)", "peak MiB", "hot ms", "wall s", "balloon MiB", "pageout MiB",
                "refault MiB", "reduction", "slowdown");
    for (const std::string& m : o.modes) {
      const ModeResult& r = results[m];
      if (!r.available) {
        std::printf("%-8s unavailable: %s\n", m.c_str(), r.why.c_str());
        continue;
      }
      std::printf("%-8s %9.3f %9.3f %9.0f %8.0f %8.1f %11.0f %11.0f %11.0f %9.1f%% %8.1f%%\n",
                  m.c_str(), r.gib_s, r.gib_s_rss, r.peak_bytes / kMiBd, r.hot_ms, r.wall_s,
                  r.balloon_released_bytes / kMiBd, r.reclaimed_bytes / kMiBd,
                  r.refault_bytes / kMiBd, 100 * red(r), 100 * slow(r));
    }
  }
  for (const auto& [m, r] : results) {
    if (r.failures > 0) {
      std::fprintf(stderr, "bench reclaim: %s: %d VM run(s) failed; first: %s\n", m.c_str(),
                   r.failures, r.first_error.c_str());
    }
  }
  return failures > 0 ? 1 : 0;
}

}  // namespace dsec::bench
