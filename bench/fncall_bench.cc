// SPDX-License-Identifier: Apache-2.0
#include "bench/fncall_bench.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/percentile.h"
#include "bench/process_runner.h"
#include "nlohmann/json.hpp"
#include "sandbox/container/sandbox.h"
#include "sandbox/fncall/pool.h"
#include "base/clock.h"
#include "base/status.h"

namespace dsec::bench {

namespace {

struct Series {
  std::vector<double> ms;
  double wall_s = 0;
  int failures = 0;
  double P(double p) const { return Percentile(ms, p); }
  double PerSecond() const { return wall_s > 0 ? static_cast<double>(ms.size()) / wall_s : 0; }
};

// `calls` calls of `code` split over `callers` threads.
Series Measure(fncall::Pool& pool, const std::string& code, int calls, int callers,
               const std::string& expect) {
  Series s;
  std::vector<std::vector<double>> per(static_cast<size_t>(callers));
  std::atomic<int> failures{0};
  std::atomic<int> next{0};
  const int64_t start = MonotonicNowNs();
  std::vector<std::thread> threads;
  for (int t = 0; t < callers; ++t) {
    threads.emplace_back([&, t] {
      fncall::CallRequest req;
      req.code = code;
      while (next.fetch_add(1) < calls) {
        int64_t t0 = MonotonicNowNs();
        auto r = pool.Call(req);
        double ms = static_cast<double>(MonotonicNowNs() - t0) / 1e6;
        if (!r.ok() || r->status() != 0 || r->stdout_data != expect) {
          if (failures.fetch_add(1) == 0) {
            fprintf(stderr, "fncall bench: call failed: %s\n",
                    r.ok() ? absl::StrCat("status ", r->status(), " ", r->stderr_data).c_str()
                           : r.status().ToString().c_str());
          }
          continue;
        }
        per[static_cast<size_t>(t)].push_back(ms);
      }
    });
  }
  for (auto& th : threads) th.join();
  s.wall_s = static_cast<double>(MonotonicNowNs() - start) / 1e9;
  for (auto& v : per) s.ms.insert(s.ms.end(), v.begin(), v.end());
  s.failures = failures.load();
  return s;
}

absl::StatusOr<std::unique_ptr<fncall::Pool>> MakePool(const FncallBenchOptions& o,
                                                       fncall::Language lang) {
  fncall::PoolConfig c;
  c.id = absl::StrFormat("bench-%s-%d", fncall::LanguageName(lang), ::getpid());
  c.layers = lang == fncall::Language::kPython ? o.python_layers : o.bash_layers;
  c.language = lang;
  c.state_root = o.state_root;
  c.limits.memory_bytes = 128ull << 20;
  c.limits.pids = 64;
  c.max_workers = std::max(o.concurrency + 2, 4);
  c.min_idle = std::min(c.max_workers, std::max(4, o.concurrency));
  DSEC_ASSIGN_OR_RETURN(auto pool, fncall::Pool::Create(std::move(c)));
  DSEC_RETURN_IF_ERROR(pool->WaitReady(std::min(pool->Stats().max_workers, std::max(4, o.concurrency)),
                                       120000));
  return pool;
}

// Create + exec + destroy of a container-tier sandbox, per run.
absl::StatusOr<std::vector<double>> ColdContainer(const FncallBenchOptions& o) {
  std::vector<double> ms;
  for (int i = 0; i < o.cold_runs; ++i) {
    int64_t t0 = MonotonicNowNs();
    container::SandboxConfig c;
    c.id = absl::StrFormat("fncall-bench-cold-%d-%d", ::getpid(), i);
    c.layers = o.python_layers;
    c.state_root = absl::StrCat(o.state_root, "-cold");
    c.limits.memory_bytes = 256ull << 20;
    c.upper_size_bytes = 64ull << 20;
    DSEC_ASSIGN_OR_RETURN(auto sb, container::Sandbox::Create(std::move(c)));
    container::ExecOptions e;
    e.argv = {"python3", "-c", "print(1)"};
    DSEC_ASSIGN_OR_RETURN(container::ExecResult r, sb->Exec(e));
    if (r.status() != 0 || r.stdout_data != "1\n") {
      return absl::InternalError(absl::StrCat("cold container python3 failed: ", r.stderr_data));
    }
    DSEC_RETURN_IF_ERROR(sb->Destroy());
    ms.push_back(static_cast<double>(MonotonicNowNs() - t0) / 1e6);
  }
  return ms;
}

}  // namespace

int RunFncallBench(const FncallBenchOptions& o) {
  if (o.python_layers.empty() || o.bash_layers.empty()) {
    fprintf(stderr, "fncall bench: no layers\n");
    return 2;
  }
  auto py = MakePool(o, fncall::Language::kPython);
  if (!py.ok()) {
    fprintf(stderr, "fncall bench: python pool: %s\n", py.status().ToString().c_str());
    return 1;
  }
  Measure(**py, "print(1)", 50, 1, "1\n");  // warm-up
  Series py_seq = Measure(**py, "print(1)", o.calls, 1, "1\n");
  Series py_conc = Measure(**py, "print(1)", o.calls, o.concurrency, "1\n");
  fncall::PoolStats py_stats = (*py)->Stats();
  (void)(*py)->Destroy();
  auto sh = MakePool(o, fncall::Language::kBash);
  if (!sh.ok()) {
    fprintf(stderr, "fncall bench: bash pool: %s\n", sh.status().ToString().c_str());
    return 1;
  }
  Measure(**sh, "true", 50, 1, "");
  Series sh_seq = Measure(**sh, "true", o.calls, 1, "");
  Series sh_conc = Measure(**sh, "true", o.calls, o.concurrency, "");
  (void)(*sh)->Destroy();
  auto cold = ColdContainer(o);
  if (!cold.ok()) {
    fprintf(stderr, "fncall bench: %s\n", cold.status().ToString().c_str());
    return 1;
  }
  std::vector<std::vector<std::string>> host_jobs(static_cast<size_t>(o.cold_runs),
                                                  {o.host_python, "-c", "print(1)"});
  auto host = RunProcesses(host_jobs, 1);
  std::vector<double> host_ms;
  if (host.ok()) {
    for (const ProcessResult& r : *host) host_ms.push_back(r.WallMs());
  }
  const int failures = py_seq.failures + py_conc.failures + sh_seq.failures + sh_conc.failures;
  const double cold_ms = Percentile(*cold, 50);
  const double host_ms_p50 = Percentile(host_ms, 50);
  if (o.json) {
    nlohmann::json j;
    j["python_p50_ms"] = py_seq.P(50);
    j["python_p99_ms"] = py_seq.P(99);
    j["python_calls_per_s_sequential"] = py_seq.PerSecond();
    j["python_concurrent_p50_ms"] = py_conc.P(50);
    j["python_concurrent_p99_ms"] = py_conc.P(99);
    j["calls_per_s"] = py_conc.PerSecond();
    j["bash_p50_ms"] = sh_seq.P(50);
    j["bash_p99_ms"] = sh_seq.P(99);
    j["bash_calls_per_s_sequential"] = sh_seq.PerSecond();
    j["bash_concurrent_p50_ms"] = sh_conc.P(50);
    j["bash_calls_per_s"] = sh_conc.PerSecond();
    j["cold_python_ms"] = cold_ms;
    j["host_python_ms"] = host_ms_p50;
    j["calls"] = o.calls;
    j["concurrency"] = o.concurrency;
    j["python_workers_started"] = py_stats.workers_started;
    j["failures"] = failures;
    printf("%s\n", j.dump().c_str());
  } else {
    auto line = [](const char* name, const Series& s) {
      printf("%-28s p50 %7.3f ms  p99 %7.3f ms  %8.0f calls/s  (%zu calls)\n", name, s.P(50),
             s.P(99), s.PerSecond(), s.ms.size());
    };
    line("python print(1), 1 caller", py_seq);
    line(absl::StrCat("python print(1), ", o.concurrency, " callers").c_str(), py_conc);
    line("bash true, 1 caller", sh_seq);
    line(absl::StrCat("bash true, ", o.concurrency, " callers").c_str(), sh_conc);
    printf("%-28s p50 %7.3f ms  (create + exec + destroy, %d runs)\n", "cold container python3",
           cold_ms, o.cold_runs);
    printf("%-28s p50 %7.3f ms  (%d runs)\n", "host python3 -c", host_ms_p50, o.cold_runs);
    if (failures) printf("failures: %d\n", failures);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace dsec::bench
