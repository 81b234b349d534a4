// SPDX-License-Identifier: Apache-2.0
#include "bench/smt_bench.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "bench/percentile.h"
#include "nlohmann/json.hpp"
#include "sched/core_sched.h"
#include "sched/cpu_list.h"
#include "sched/isolation.h"
#include "sched/placement.h"
#include "sched/thread_placement.h"
#include "sched/topology.h"
#include "base/clock.h"
#include "base/status.h"
#include "vmm/vm/vm.h"

namespace dsec::bench {

namespace {

using sched::ThreadPlacement;

// How one side (the LS thread, or every BE thread) is placed in a mode.
struct Side {
  ThreadPlacement placement;
  // Core-sched mode: the side gets a cookie of its own, created by its
  // first thread and joined by the rest.
  bool own_cookie = false;
};

// The cookie of one side, created by whichever of its threads comes first.
struct SideCookie {
  std::optional<sched::CoreSchedCookie> cookie;
};

absl::Status PlaceCurrentThread(const Side& side, SideCookie* shared) {
  DSEC_RETURN_IF_ERROR(sched::ApplyToCurrentThread(side.placement));
  if (!side.own_cookie) return absl::OkStatus();
  if (shared->cookie) return shared->cookie->JoinCurrentThread();
  DSEC_ASSIGN_OR_RETURN(sched::CoreSchedCookie c, sched::CoreSchedCookie::CreateForCurrentThread());
  shared->cookie = c;
  return absl::OkStatus();
}

// ---- BE noise --------------------------------------------------------------

enum class NoiseKind { kMemBandwidth, kAlu, kCacheThrash };
const char* NoiseName(NoiseKind k) {
  return k == NoiseKind::kMemBandwidth ? "membw" : k == NoiseKind::kAlu ? "alu" : "cache";
}

void NoiseLoop(NoiseKind kind, const std::atomic<bool>& stop) {
  std::vector<uint64_t> buf;
  if (kind == NoiseKind::kMemBandwidth) buf.assign((64u << 20) / 8, 1);  // far beyond any LLC
  if (kind == NoiseKind::kCacheThrash) buf.assign((8u << 20) / 8, 1);    // about an LLC slice
  uint64_t x = 0x9e3779b97f4a7c15ull, acc = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    switch (kind) {
      case NoiseKind::kMemBandwidth:
        // Streams one 64 MiB pass in 1 MiB strides of cache lines.
        for (size_t base = 0; base < buf.size() && !stop.load(std::memory_order_relaxed);
             base += (1u << 20) / 8) {
          for (size_t i = base; i < base + (1u << 20) / 8; i += 8) buf[i] += i;
        }
        break;
      case NoiseKind::kAlu:
        for (int i = 0; i < (1 << 20); ++i) {
          x = x * 6364136223846793005ull + 1442695040888963407ull;
          acc ^= x >> 17;
        }
        break;
      case NoiseKind::kCacheThrash:
        for (int i = 0; i < (1 << 16); ++i) {
          x = x * 6364136223846793005ull + 1442695040888963407ull;
          buf[(x >> 20) % buf.size()] += acc++;
        }
        break;
    }
  }
  // Keeps the work observable so the compiler cannot drop it.
  static std::atomic<uint64_t> sink;
  sink.fetch_add(acc + (buf.empty() ? 0 : buf[0]), std::memory_order_relaxed);
}

// BE noise threads, each placed before the next starts; stopped and joined
// on destruction.
class Noise {
 public:
  static absl::StatusOr<std::unique_ptr<Noise>> Start(int threads, const Side& side) {
    std::unique_ptr<Noise> n(new Noise());
    for (int i = 0; i < threads; ++i) {
      const NoiseKind kind = static_cast<NoiseKind>(i % 3);
      absl::Notification placed;
      absl::Status status;
      n->threads_.emplace_back([&side, &placed, &status, kind, raw = n.get()] {
        status = PlaceCurrentThread(side, &raw->cookie_);
        const bool ok = status.ok();
        placed.Notify();  // `placed` and `status` die soon after: touch neither below
        if (ok) NoiseLoop(kind, raw->stop_);
      });
      placed.WaitForNotification();
      if (!status.ok()) return Annotate(status, absl::StrCat("placing BE noise thread ", i));
    }
    return n;
  }
  ~Noise() {
    stop_.store(true);
    for (std::thread& t : threads_) t.join();
  }

 private:
  Noise() = default;
  std::atomic<bool> stop_{false};
  SideCookie cookie_;
  std::vector<std::thread> threads_;
};

// ---- LS units --------------------------------------------------------------

// A ring visiting every slot of an L2-sized array in random order: each step
// is a dependent load, so the unit is sensitive to cache sharing as well as
// to losing the CPU.
std::vector<uint32_t> MakeRing(size_t slots) {
  std::vector<uint32_t> order(slots);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin() + 1, order.end(), std::mt19937(42));
  std::vector<uint32_t> next(slots);
  for (size_t i = 0; i < slots; ++i) next[order[i]] = order[(i + 1) % slots];
  return next;
}

uint64_t ChaseRing(const std::vector<uint32_t>& next, uint64_t steps) {
  uint32_t i = 0;
  uint64_t acc = 0;
  for (uint64_t s = 0; s < steps; ++s) {
    i = next[i];
    acc = acc * 31 + i;
  }
  return acc;
}

// One unit of LS work; returns its duration in ms.
using Unit = std::function<absl::StatusOr<double>()>;

Unit ThreadUnit(const std::vector<uint32_t>* ring, uint64_t steps) {
  return [ring, steps]() -> absl::StatusOr<double> {
    static std::atomic<uint64_t> sink;
    const int64_t t0 = MonotonicNowNs();
    sink.fetch_add(ChaseRing(*ring, steps), std::memory_order_relaxed);
    return static_cast<double>(MonotonicNowNs() - t0) / 1e6;
  };
}

// Boots the test guest with spin:N and returns the guest's CPL3 time
// (first user instruction -> workload done, as the monitor saw the test
// device events). The vCPU thread inherits the calling thread's affinity,
// cgroup and core-scheduling cookie: that is what places it.
Unit GuestUnit(std::string kernel, uint64_t spins) {
  return [kernel, spins]() -> absl::StatusOr<double> {
    vm::VmConfig config;
    config.kernel_path = kernel;
    config.cmdline = absl::StrCat("testguest.run=spin:", spins);
    config.mem_mib = 32;
    config.console.kind = vm::ConsoleConfig::Kind::kNone;
    config.timeout_ms = 20000;
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<vm::Vm> machine, vm::Vm::Create(config));
    DSEC_RETURN_IF_ERROR(machine->Start());
    vm::VmStats stats = machine->Wait();
    const vm::BootTimestamps& ts = stats.timestamps;
    if (stats.stop.reason != vm::StopReason::kGuestShutdown || stats.stop.guest_exit_code != 0 ||
        ts.first_user_ns == 0 || ts.workload_done_ns == 0) {
      return absl::InternalError(absl::StrCat("test guest spin:", spins, " did not finish: ",
                                              std::string(vm::StopReasonName(stats.stop.reason)),
                                              " ", stats.stop.detail));
    }
    return static_cast<double>(ts.workload_done_ns - ts.first_user_ns) / 1e6;
  };
}

// Runs `unit` up to `samples` times (or until `deadline_ms`) on a fresh
// thread placed by `side`.
absl::StatusOr<std::vector<double>> TimeUnits(const Side& side, const Unit& unit, int samples,
                                              double deadline_ms) {
  absl::Status status;
  std::vector<double> ms;
  std::thread t([&] {
    SideCookie cookie;
    status = PlaceCurrentThread(side, &cookie);
    for (int i = 0; status.ok() && i < samples && (i < 5 || MonotonicNowMs() < deadline_ms); ++i) {
      absl::StatusOr<double> one = unit();
      if (!one.ok()) {
        status = one.status();
      } else {
        ms.push_back(*one);
      }
    }
  });
  t.join();
  if (!status.ok()) return status;
  return ms;
}

// Scales `work` so that one unit takes about `target_ms` alone.
template <typename MakeUnit>
absl::StatusOr<uint64_t> Calibrate(const Side& side, uint64_t work, double target_ms,
                                   MakeUnit make) {
  for (int round = 0; round < 3; ++round) {
    DSEC_ASSIGN_OR_RETURN(std::vector<double> ms, TimeUnits(side, make(work), 3, 0));
    const double best = *std::min_element(ms.begin(), ms.end());
    if (best <= 0) return absl::InternalError("calibration measured zero time");
    work = std::max<uint64_t>(1000, static_cast<uint64_t>(static_cast<double>(work) * target_ms / best));
  }
  return work;
}

// ---- modes -----------------------------------------------------------------

struct ModeResult {
  std::string mode, workload;
  double p50_ms = 0, p99_ms = 0;
  size_t samples = 0;
};

struct Mode {
  std::string name;
  Side ls;
  std::optional<Side> be;  // nullopt: alone
  // Partitioned mode: the sandboxes' cgroups, removed when the mode ends.
  std::unique_ptr<sched::SandboxIsolation> ls_iso, be_iso;
};

}  // namespace

int RunSmtBench(const SmtBenchOptions& o) {
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "bench smt: %s\n", s.ToString().c_str());
    return 1;
  };
  if (o.samples < 5 || o.unit_ms <= 0 || o.budget_s <= 0) {
    std::fprintf(stderr, "bench smt: --samples must be >= 5, --unit-ms and --budget-s > 0\n");
    return 2;
  }
  absl::StatusOr<sched::Topology> topo = sched::Topology::Read("/");
  if (!topo.ok()) return fail(topo.status());
  const bool smt = topo->smt();
  const std::vector<int> all_cpus = topo->online_cpus();
  const int noise_threads = std::max<int>(2, static_cast<int>(all_cpus.size()));

  // The LS sandbox's placement decides which core "its" core is.
  auto engine = sched::PlacementEngine::Create(*topo);
  if (!engine.ok()) return fail(engine.status());
  auto ls_place = (*engine)->Place({"bench-ls", sched::QosClass::kLatencySensitive, 1});
  if (!ls_place.ok()) return fail(ls_place.status());
  absl::StatusOr<sched::Placement> be_place =
      (*engine)->Place({"bench-be", sched::QosClass::kBestEffort, noise_threads});
  const int ls_cpu = ls_place->vcpu_cpus[0];
  std::vector<int> same_core_be;  // the LS core's other siblings, or the LS CPU itself
  for (int cpu : ls_place->cpus) {
    if (cpu != ls_cpu) same_core_be.push_back(cpu);
  }
  if (same_core_be.empty()) same_core_be = {ls_cpu};

  const absl::Status core_sched = sched::ProbeCoreScheduling(sched::SystemSchedCoreOps());
  sched::IsolationOptions iso_options;
  iso_options.force = sched::IsolationMechanism::kCpusetPartitioning;
  auto cpuset_isolator = sched::Isolator::Create(iso_options);

  // Workloads.
  const Side pinned_alone{ThreadPlacement{.cpus = {ls_cpu}}, false};
  const std::vector<uint32_t> ring = MakeRing((256u << 10) / sizeof(uint32_t));
  auto steps = Calibrate(pinned_alone, 1 << 20, o.unit_ms,
                         [&](uint64_t w) { return ThreadUnit(&ring, w); });
  if (!steps.ok()) return fail(steps.status());
  struct Workload {
    std::string name;
    Unit unit;
    int samples;
  };
  std::vector<Workload> workloads = {{"thread", ThreadUnit(&ring, *steps), o.samples}};
  std::string guest_note;
  uint64_t spins = 0;
  if (o.guest_samples <= 0) {
    guest_note = "skipped (--guest-samples 0)";
  } else if (o.kernel.empty() || ::access(o.kernel.c_str(), R_OK) != 0) {
    guest_note = "skipped: test guest not found (build it first)";
  } else if (::access("/dev/kvm", R_OK | W_OK) != 0) {
    guest_note = "skipped: /dev/kvm not usable";
  } else {
    auto n = Calibrate(pinned_alone, 10'000'000, o.guest_unit_ms,
                       [&](uint64_t w) { return GuestUnit(o.kernel, w); });
    if (n.ok()) {
      spins = *n;
      workloads.push_back({"guest", GuestUnit(o.kernel, spins), o.guest_samples});
    } else {
      guest_note = absl::StrCat("skipped: ", n.status().ToString());
    }
  }

  // Modes, in order; those the host cannot run are listed with the reason.
  std::vector<std::pair<std::string, std::string>> skipped;
  std::vector<Mode> modes;
  modes.push_back({"alone", pinned_alone, std::nullopt, nullptr, nullptr});
  modes.push_back({"unmanaged", Side{ThreadPlacement{.cpus = all_cpus}, false},
                   Side{ThreadPlacement{.cpus = all_cpus}, false}, nullptr, nullptr});
  modes.push_back({"same-core", pinned_alone, Side{ThreadPlacement{.cpus = same_core_be}, false},
                   nullptr, nullptr});
  if (core_sched.ok()) {
    modes.push_back({"core-sched", Side{ThreadPlacement{.cpus = {ls_cpu}}, true},
                     Side{ThreadPlacement{.cpus = same_core_be}, true}, nullptr, nullptr});
  } else {
    skipped.push_back({"core-sched", std::string(core_sched.message())});
  }
  if (!cpuset_isolator.ok()) {
    skipped.push_back({"partitioned", std::string(cpuset_isolator.status().message())});
  } else if (!be_place.ok()) {
    skipped.push_back({"partitioned", std::string(be_place.status().message())});
  } else {
    modes.push_back({"partitioned", {}, {}, nullptr, nullptr});
  }

  std::vector<ModeResult> results;
  const int64_t start_ms = MonotonicNowMs();
  const double budget_ms = o.budget_s * 1000;
  const double runs = static_cast<double>(modes.size() * workloads.size());
  for (size_t m = 0; m < modes.size(); ++m) {
    Mode& mode = modes[m];
    if (mode.name == "partitioned") {
      auto ls_iso = (*cpuset_isolator)->Isolate(*ls_place);
      if (!ls_iso.ok()) return fail(ls_iso.status());
      auto be_iso = (*cpuset_isolator)->Isolate(*be_place);
      if (!be_iso.ok()) return fail(be_iso.status());
      mode.ls_iso = std::move(*ls_iso);
      mode.be_iso = std::move(*be_iso);
      mode.ls = Side{mode.ls_iso->ForVcpu(0), false};
      mode.be = Side{mode.be_iso->ForSandboxThread(), false};
    }
    std::unique_ptr<Noise> noise;
    if (mode.be) {
      auto started = Noise::Start(noise_threads, *mode.be);
      if (!started.ok()) return fail(Annotate(started.status(), mode.name));
      noise = std::move(*started);
    }
    for (size_t w = 0; w < workloads.size(); ++w) {
      // An equal share of what is left of the budget for each remaining run.
      const double index = static_cast<double>(m * workloads.size() + w);
      const double left = budget_ms - (MonotonicNowMs() - start_ms);
      const double deadline = MonotonicNowMs() + std::max(0.0, left / (runs - index));
      auto ms = TimeUnits(mode.ls, workloads[w].unit, workloads[w].samples, deadline);
      if (!ms.ok()) return fail(Annotate(ms.status(), mode.name));
      results.push_back({mode.name, workloads[w].name, Percentile(*ms, 50), Percentile(*ms, 99),
                         ms->size()});
    }
    noise.reset();
    mode.ls_iso.reset();
    mode.be_iso.reset();
  }

  auto baseline = [&](const std::string& workload) -> const ModeResult& {
    for (const ModeResult& r : results) {
      if (r.mode == "alone" && r.workload == workload) return r;
    }
    return results.front();
  };
  nlohmann::json mode_results = nlohmann::json::array();
  for (const ModeResult& r : results) {
    const ModeResult& base = baseline(r.workload);
    mode_results.push_back({{"mode", r.mode},
                            {"workload", r.workload},
                            {"p50_slowdown", r.p50_ms / base.p50_ms - 1},
                            {"p99_slowdown", r.p99_ms / base.p99_ms - 1},
                            {"p50_ms", r.p50_ms},
                            {"p99_ms", r.p99_ms},
                            {"samples", r.samples}});
  }
  nlohmann::json skipped_json = nlohmann::json::array();
  for (const auto& [mode, reason] : skipped) skipped_json.push_back({{"mode", mode}, {"reason", reason}});
  const std::string same_core_meaning =
      smt ? "BE noise on the SMT siblings of the LS thread's core"
          : "no SMT siblings on this host: BE noise time-shares the LS thread's own CPU";
  const std::string partitioned_meaning =
      absl::StrCat("LS cpuset ", sched::FormatCpuList(ls_place->cpus), ", BE cpuset ",
                   be_place.ok() ? sched::FormatCpuList(be_place->cpus) : "-",
                   smt ? " (whole cores)" : " (separate cores)");
  nlohmann::json out = {
      {"smt", smt},
      {"topology", topo->Describe()},
      {"core_sched", {{"available", core_sched.ok()},
                      {"reason", core_sched.ok() ? "" : std::string(core_sched.message())}}},
      {"noise_threads", noise_threads},
      {"thread_unit_steps", *steps},
      {"guest_unit_spins", spins},
      {"same_core", same_core_meaning},
      {"partitioned", partitioned_meaning},
      {"mode_results", mode_results},
      {"skipped_modes", skipped_json},
  };
  if (!guest_note.empty()) out["guest"] = guest_note;
  if (o.json) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("bench smt: %s\n", topo->Describe().c_str());
  std::printf("  %s\n", smt ? "SMT siblings present: same-core = BE on the LS core's siblings"
                             : "no SMT siblings on this host: measuring same-core sharing (LS and "
                               "BE pinned to one CPU) against separate cores instead");
  std::printf("  core scheduling: %s\n",
              core_sched.ok() ? "present" : absl::StrCat("absent (", core_sched.message(), ")").c_str());
  std::printf("  partitioned: %s\n", partitioned_meaning.c_str());
  std::string kinds;
  for (int i = 0; i < noise_threads; ++i) {
    absl::StrAppend(&kinds, i ? "," : "", NoiseName(static_cast<NoiseKind>(i % 3)));
  }
  std::printf("  BE noise: %d threads (%s); LS unit: thread %llu ring steps, guest %s\n",
              noise_threads, kinds.c_str(), static_cast<unsigned long long>(*steps),
              spins ? absl::StrCat("spin:", spins, " at CPL3").c_str() : guest_note.c_str());
  std::printf("  %-12s %-8s %8s %9s %9s %13s %13s\n", "mode", "workload", "samples", "p50 ms",
              "p99 ms", "p50 slowdown", "p99 slowdown");
  for (const auto& r : mode_results) {
    std::printf("  %-12s %-8s %8zu %9.2f %9.2f %12.1f%% %12.1f%%\n",
                r["mode"].get<std::string>().c_str(), r["workload"].get<std::string>().c_str(),
                r["samples"].get<size_t>(), r["p50_ms"].get<double>(), r["p99_ms"].get<double>(),
                100 * r["p50_slowdown"].get<double>(), 100 * r["p99_slowdown"].get<double>());
  }
  for (const auto& [mode, reason] : skipped) {
    std::printf("  %-12s not run: %s\n", mode.c_str(), reason.c_str());
  }
  return 0;
}

}  // namespace dsec::bench
