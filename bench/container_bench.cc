// SPDX-License-Identifier: Apache-2.0
#include "bench/container_bench.h"

#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/clock.h"
#include "bench/crun_peer.h"
#include "base/mount.h"
#include "bench/percentile.h"
#include "nlohmann/json.hpp"
#include "sandbox/container/cgroups.h"
#include "sandbox/container/init_pool.h"
#include "sandbox/container/sandbox.h"
#include "sandbox/container/cgroups.h"
#include "sandbox/container/container_tier.h"
#include "sandbox/container/test_image.h"
#include "sandbox/network/node_network.h"
#include "sandbox/network/policy.h"
#include "sandbox/network/sandbox_network.h"
#include "sandbox/tier/tier.h"
#include "base/file_io.h"
#include "base/status.h"

namespace dsec::bench {

namespace {

using container::Sandbox;
using container::SandboxConfig;

struct Setup {
  std::string image;
  std::string state_root;
  uint64_t image_bytes = 0;
  container::InitPool* pool = nullptr;  // made-ahead inits, as the daemon keeps
};

SandboxConfig Config(const Setup& s, const std::string& id) {
  SandboxConfig c;  // default limits, upper size and env: as `sandbox run`
  c.id = id;
  c.layers = {s.image};
  c.state_root = s.state_root;
  c.init_pool = s.pool;
  return c;
}

struct CycleMs {
  double create = 0, exec = 0, destroy = 0;
};

// One Sandbox::Create + Exec(`true`) + Destroy.
absl::StatusOr<CycleMs> OwnCycle(const Setup& s, const std::string& id) {
  CycleMs t;
  double t0 = MonotonicNowS();
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<Sandbox> sb, Sandbox::Create(Config(s, id)));
  double t1 = MonotonicNowS();
  container::ExecOptions exec;
  exec.argv = {"true"};
  DSEC_ASSIGN_OR_RETURN(container::ExecResult r, sb->Exec(exec));
  double t2 = MonotonicNowS();
  if (r.status() != 0) return absl::InternalError(absl::StrCat("`true` exited ", r.status()));
  DSEC_RETURN_IF_ERROR(sb->Destroy());
  double t3 = MonotonicNowS();
  t.create = (t1 - t0) * 1e3;
  t.exec = (t2 - t1) * 1e3;
  t.destroy = (t3 - t2) * 1e3;
  return t;
}

// One create + Exec(`true`) + destroy through the container tier (the
// daemon's path: made-ahead inits, the cgroup v2 directory and device
// policy of every sandbox), with a network (nothing allowed) when `node`.
absl::StatusOr<CycleMs> TierCycle(container::ContainerTier& tier, const Setup& s, const std::string& id,
                                  network::NodeNetwork* node) {
  static const auto kNothingAllowed = std::make_shared<const network::NetworkSpec>();
  tier::CreateSpec spec;
  spec.id = id;
  spec.images = {s.image};
  if (node != nullptr) {
    spec.network = kNothingAllowed;
    spec.node_network = node;
  }
  CycleMs t;
  const double t0 = MonotonicNowS();
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<tier::TierSandbox> sb, tier.Create(spec));
  const double t1 = MonotonicNowS();
  tier::ExecSpec exec;
  exec.argv = {"true"};
  DSEC_ASSIGN_OR_RETURN(tier::ExecOutcome r, sb->Exec(exec));
  const double t2 = MonotonicNowS();
  if (r.exit_code != 0) return absl::InternalError("`true` failed in a tier sandbox");
  DSEC_RETURN_IF_ERROR(sb->Destroy());
  const double t3 = MonotonicNowS();
  t.create = (t1 - t0) * 1e3;
  t.exec = (t2 - t1) * 1e3;
  t.destroy = (t3 - t2) * 1e3;
  return t;
}

// Cycles back to back on `workers` threads, `count` in all. Returns wall s.
absl::StatusOr<double> Sustained(const Setup& s, int count, int workers, const std::string& tag) {
  std::atomic<int> next{0};
  std::vector<absl::Status> errors(static_cast<size_t>(workers));
  double start = MonotonicNowS();
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      for (int i = next++; i < count; i = next++) {
        auto t = OwnCycle(s, absl::StrCat("b", ::getpid(), "-", tag, w, "-", i));
        if (!t.ok()) {
          errors[static_cast<size_t>(w)] = t.status();
          next = count;
          return;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  double wall = MonotonicNowS() - start;
  for (const absl::Status& e : errors) {
    if (!e.ok()) return e;
  }
  return wall;
}

uint64_t ReadU64(const std::string& path) {
  auto text = dsec::ReadSmallFile(path);
  uint64_t v = 0;
  if (!text.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &v)) return 0;
  return v;
}

// This process in a fresh v1 memory cgroup of its own (a child of the one
// it was in), so that everything charged from now on — its own pages, the
// kernel objects it allocates with accounting (mounts, namespaces, page
// tables, task structs of the inits it clones, per-cpu data of the
// sandboxes' memory cgroups) and every sandbox cgroup below it — adds up
// in one hierarchical counter. Moved back and removed on destruction.
class MemoryProbe {
 public:
  static absl::StatusOr<std::unique_ptr<MemoryProbe>> Create() {
    DSEC_ASSIGN_OR_RETURN(std::string mountinfo, dsec::ReadSmallFile("/proc/self/mountinfo"));
    DSEC_ASSIGN_OR_RETURN(std::string self, dsec::ReadSmallFile("/proc/self/cgroup"));
    DSEC_ASSIGN_OR_RETURN(auto found,
                          container::FindControllers(mountinfo, self, dsec::ReadSmallFile));
    for (const container::ControllerDir& c : found) {
      if (c.controller != "memory") continue;
      // On v2 a cgroup holding this process cannot also hold the sandboxes'
      // cgroups with the memory controller enabled (no internal processes).
      if (c.v2) return absl::UnavailableError("memory controller on cgroup v2");
      std::string dir = absl::StrCat(c.parent, "/dsec-bench-ctr-", ::getpid());
      if (::mkdir(dir.c_str(), 0755) != 0) return ErrnoToStatus("mkdir " + dir);
      std::unique_ptr<MemoryProbe> p(new MemoryProbe(c.parent, dir));
      DSEC_RETURN_IF_ERROR(
          dsec::WriteSmallFile(dir + "/cgroup.procs", absl::StrCat(::getpid())));
      p->moved_ = true;
      return p;
    }
    return absl::UnavailableError("no memory cgroup controller");
  }
  ~MemoryProbe() {
    if (moved_) (void)dsec::WriteSmallFile(parent_ + "/cgroup.procs", absl::StrCat(::getpid()));
    ::rmdir(dir_.c_str());
  }
  uint64_t UsageBytes() const { return ReadU64(dir_ + "/memory.usage_in_bytes"); }

 private:
  MemoryProbe(std::string parent, std::string dir) : parent_(std::move(parent)), dir_(std::move(dir)) {}
  std::string parent_, dir_;
  bool moved_ = false;
};

struct Meminfo {
  int64_t used = 0;    // MemTotal - MemAvailable
  int64_t kernel = 0;  // SUnreclaim + KernelStack + PageTables + Percpu
};
Meminfo ReadMeminfo() {
  Meminfo m;
  auto text = dsec::ReadSmallFile("/proc/meminfo");
  if (!text.ok()) return m;
  auto kib = [&](const char* key) {
    return static_cast<int64_t>(MeminfoKib(*text, key).value_or(0)) * 1024;
  };
  m.used = kib("MemTotal") - kib("MemAvailable");
  m.kernel = kib("SUnreclaim") + kib("KernelStack") + kib("PageTables") + kib("Percpu");
  return m;
}

struct IdleFigures {
  std::string method;
  std::optional<double> cgroup_kib;          // growth of the probe cgroup / sandbox
  std::optional<double> sandbox_cgroup_kib;  // mean of each sandbox's own memory cgroup
  double host_kib = 0;                       // MemTotal - MemAvailable growth / sandbox
  double kernel_kib = 0;                     // kernel counters' growth / sandbox
};

absl::StatusOr<IdleFigures> MeasureIdle(const Setup& s, int count) {
  IdleFigures f;
  auto probe = MemoryProbe::Create();
  if (!probe.ok()) {
    f.method = absl::StrCat("meminfo only (", probe.status().message(), ")");
  } else {
    f.method = "own memory cgroup";
  }
  // Warm-up: the runtime's first sandboxes fault in code and caches.
  for (int i = 0; i < 2; ++i) {
    DSEC_RETURN_IF_ERROR(OwnCycle(s, absl::StrCat("b", ::getpid(), "-warm", i)).status());
  }
  uint64_t before = probe.ok() ? (*probe)->UsageBytes() : 0;
  Meminfo m0 = ReadMeminfo();
  std::vector<std::unique_ptr<Sandbox>> idle;
  uint64_t own_sum = 0;
  for (int i = 0; i < count; ++i) {
    DSEC_ASSIGN_OR_RETURN(auto sb, Sandbox::Create(Config(s, absl::StrCat("b", ::getpid(), "-idle", i))));
    idle.push_back(std::move(sb));
  }
  uint64_t after = probe.ok() ? (*probe)->UsageBytes() : 0;
  Meminfo m1 = ReadMeminfo();
  for (const auto& sb : idle) {
    for (const std::string& d : sb->cgroups().dirs()) own_sum += ReadU64(d + "/memory.usage_in_bytes");
  }
  idle.clear();  // destroys them
  if (probe.ok()) {
    f.cgroup_kib = PerItemKib(static_cast<int64_t>(before), static_cast<int64_t>(after), count);
    f.sandbox_cgroup_kib = PerItemKib(0, static_cast<int64_t>(own_sum), count);
  }
  f.host_kib = PerItemKib(m0.used, m1.used, count);
  f.kernel_kib = PerItemKib(m0.kernel, m1.kernel, count);
  return f;
}

std::string Ms(double v) { return absl::StrCat(static_cast<int64_t>(v * 1000 + 0.5) / 1000.0); }

}  // namespace

LatencySummary Summarize(const std::vector<double>& samples) {
  LatencySummary s;
  s.n = samples.size();
  if (samples.empty()) return s;
  s.p50 = Percentile(samples, 50);
  s.p99 = Percentile(samples, 99);
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(s.n);
  auto [lo, hi] = std::minmax_element(samples.begin(), samples.end());
  s.min = *lo;
  s.max = *hi;
  return s;
}

double PerSecond(size_t count, double wall_s) {
  return wall_s > 0 ? static_cast<double>(count) / wall_s : 0;
}

double PerItemKib(int64_t before_bytes, int64_t after_bytes, int items) {
  if (items <= 0) return 0;
  return static_cast<double>(after_bytes - before_bytes) / 1024.0 / items;
}

std::optional<uint64_t> MeminfoKib(std::string_view meminfo, std::string_view key) {
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(meminfo.data(), meminfo.size()), '\n', absl::SkipEmpty())) {
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos ||
        line.substr(0, colon) != absl::string_view(key.data(), key.size())) {
      continue;
    }
    absl::string_view rest = absl::StripAsciiWhitespace(line.substr(colon + 1));
    absl::ConsumeSuffix(&rest, "kB");
    uint64_t v = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &v)) return v;
    return std::nullopt;
  }
  return std::nullopt;
}

int RunContainerBench(const ContainerBenchOptions& o) {
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "bench container: %s\n", s.ToString().c_str());
    return 1;
  };
  if (::geteuid() != 0) return fail(absl::PermissionDeniedError("needs root"));
  auto dir = container::testing::TempDir::Create("dsec-bench-ctr-");
  if (!dir.ok()) return fail(dir.status());
  Setup s;
  s.image = dir->path() + "/busybox.erofs";
  // Both runtimes keep their state on one tmpfs, as /run is on a systemd
  // host (`sandbox run` makes its default root one; see state_dir.h).
  const std::string run_dir = dir->path() + "/run";
  if (::mkdir(run_dir.c_str(), 0700) != 0) return fail(ErrnoToStatus("mkdir " + run_dir));
  auto run_mount = Mount::Tmpfs(run_dir, 256ull << 20);
  if (!run_mount.ok()) return fail(run_mount.status());
  s.state_root = o.state_on_disk ? dir->path() + "/state" : run_dir + "/state";
  absl::Status built = container::testing::BuildBusyboxTree(dir->path() + "/tree");
  if (built.ok()) built = container::testing::MakeErofs(dir->path() + "/tree", s.image);
  if (!built.ok()) return fail(built);
  struct stat st;
  if (::stat(s.image.c_str(), &st) == 0) s.image_bytes = static_cast<uint64_t>(st.st_size);
  // The daemon's path keeps made-ahead inits (init_pool.h); DSEC_INIT_POOL=N
  // sets how many (0: none, every create from scratch).
  size_t pool_target = 2;
  if (const char* env = std::getenv("DSEC_INIT_POOL"); env != nullptr) {
    uint64_t n = 0;
    if (absl::SimpleAtoi(env, &n)) pool_target = static_cast<size_t>(std::min<uint64_t>(n, 64));
  }
  std::unique_ptr<container::InitPool> pool;
  if (pool_target > 0) {
    auto p = container::InitPool::Create(s.state_root, pool_target);
    if (!p.ok()) return fail(p.status());
    pool = std::move(*p);
    s.pool = pool.get();
  }

  std::unique_ptr<CrunPeer> crun;
  std::string crun_note;
  if (!o.crun.empty()) {
    const SandboxConfig defaults;
    auto peer = CrunPeer::Create(o.crun, s.image, dir->path() + "/crun", run_dir + "/crun",
                                 defaults.limits.memory_bytes, defaults.limits.pids_max);
    if (peer.ok()) {
      crun = std::move(*peer);
    } else {
      crun_note = std::string(peer.status().message());
      std::fprintf(stderr, "bench container: no crun figures: %s\n", crun_note.c_str());
    }
  }

  std::unique_ptr<network::NodeNetwork> node;
  std::unique_ptr<container::ContainerTier> tier;
  if (o.network) {
    // A state root of its own: its made-ahead inits are not the bench's.
    const std::string tier_root = s.state_root + "-tier";
    ::mkdir(tier_root.c_str(), 0700);
    tier = std::make_unique<container::ContainerTier>(
        container::ContainerTierOptions{tier_root, container::SandboxConfig{}.upper_size_bytes, 2});
    network::NodeNetworkOptions no;
    no.subnet = o.net_subnet;
    no.netns_ahead = 4;  // as the daemon's default (--net-netns-ahead)
    auto n = network::NodeNetwork::Create(no);
    if (!n.ok()) return fail(n.status());
    node = std::move(*n);
    // As a daemon that has been up a while: its made-ahead policies and
    // wired namespaces ready.
    (void)node->WaitPoliciesReady(no.policies_ahead, MonotonicNowNs() + 10'000'000'000);
    (void)node->WaitWiredReady(no.netns_ahead, MonotonicNowNs() + 10'000'000'000);
  }
  // Latency, interleaved: own cycle, own cycle with a network, crun, CLI.
  // One untimed round first.
  std::vector<double> create, exec, destroy, cycle, create_exec, crun_ms, cli_ms, tier_create, tier_destroy,
      net_create, net_destroy;
  const std::string tag = absl::StrCat("b", ::getpid());
  auto pause = [&o] {
    if (o.gap_ms <= 0) return;
    timespec ts{o.gap_ms / 1000, static_cast<long>(o.gap_ms % 1000) * 1'000'000};
    while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  };
  // As on a node where other sandboxes live: one networked sandbox stays
  // up through the measurement, so that no create or destroy is the
  // node's first or last of its kind (the kernel switches its cgroup-BPF
  // hooks on with the first program of a type and off with the last, a
  // few ms each time).
  std::unique_ptr<tier::TierSandbox> resident;
  if (node) {
    static const auto kNothing = std::make_shared<const network::NetworkSpec>();
    tier::CreateSpec rs;
    rs.id = absl::StrCat(tag, "-resident");
    rs.images = {s.image};
    rs.network = kNothing;
    rs.node_network = node.get();
    auto r = tier->Create(rs);
    if (!r.ok()) return fail(r.status());
    resident = std::move(*r);
  }
  for (int i = -1; i < o.iterations; ++i) {
    pause();
    auto t = OwnCycle(s, absl::StrCat(tag, "-lat", i + 1));
    if (!t.ok()) return fail(t.status());
    if (node) {
      pause();
      auto tt = TierCycle(*tier, s, absl::StrCat(tag, "-tier", i + 1), nullptr);
      if (!tt.ok()) return fail(tt.status());
      pause();
      auto tn = TierCycle(*tier, s, absl::StrCat(tag, "-net", i + 1), node.get());
      if (!tn.ok()) return fail(tn.status());
      if (i >= 0) {
        tier_create.push_back(tt->create);
        tier_destroy.push_back(tt->destroy);
        net_create.push_back(tn->create);
        net_destroy.push_back(tn->destroy);
      }
    }
    if (crun) {
      pause();
      auto c = crun->Run(absl::StrCat("dsec-bench-crun-", ::getpid(), "-", i + 1));
      if (!c.ok()) return fail(c.status());
      if (i >= 0) crun_ms.push_back(*c);
    }
    if (!o.self_exe.empty()) {
      pause();
      auto c = TimedRun({o.self_exe, "sandbox", "run", "--tier", "container", "--layers", s.image,
                         "--state-dir", s.state_root, "--", "true"},
                        -1, dir->path() + "/cli.err");
      if (!c.ok()) return fail(c.status());
      if (i >= 0) cli_ms.push_back(*c);
    }
    if (i < 0) continue;
    create.push_back(t->create);
    exec.push_back(t->exec);
    destroy.push_back(t->destroy);
    cycle.push_back(t->create + t->exec + t->destroy);
    create_exec.push_back(t->create + t->exec);
  }
  crun.reset();  // its namespace and mounts go; threads start below
  const uint64_t net_inline = node ? node->policies_loaded_inline() : 0;
  const uint64_t wired_inline = node ? node->wired_made_inline() : 0;
  if (resident) {
    if (absl::Status d = resident->Destroy(); !d.ok()) return fail(d);
    resident.reset();
  }
  tier.reset();
  node.reset();
  const container::InitPoolStats lat_pool = pool ? pool->stats() : container::InitPoolStats{};

  auto serial = Sustained(s, o.sustained, 1, "s");
  if (!serial.ok()) return fail(serial.status());
  auto parallel = Sustained(s, o.sustained, o.workers, "w");
  if (!parallel.ok()) return fail(parallel.status());
  const double per_s_serial = PerSecond(static_cast<size_t>(o.sustained), *serial);
  const double per_s_workers = PerSecond(static_cast<size_t>(o.sustained), *parallel);
  const bool workers_better = per_s_workers > per_s_serial;
  const double per_s = workers_better ? per_s_workers : per_s_serial;
  const std::string per_s_mode = workers_better ? absl::StrCat(o.workers, " workers") : "serial";

  // Idle memory without made-ahead inits: a slot made during the
  // measurement would land in the probe's cgroup (and count twice).
  const container::InitPoolStats pool_stats = pool ? pool->stats() : container::InitPoolStats{};
  pool.reset();
  s.pool = nullptr;
  auto idle = MeasureIdle(s, o.idle);
  if (!idle.ok()) return fail(idle.status());
  const double idle_kib = idle->cgroup_kib.value_or(idle->host_kib);

  const LatencySummary c = Summarize(cycle), cr = Summarize(create), ex = Summarize(exec),
                       de = Summarize(destroy), cu = Summarize(crun_ms), cl = Summarize(cli_ms);
  const LatencySummary nc = Summarize(net_create), nd = Summarize(net_destroy), tc = Summarize(tier_create),
                       td = Summarize(tier_destroy);
  const double ratio = c.p50 > 0 && cu.n ? cu.p50 / c.p50 : 0;
  const double cli_ratio = cl.p50 > 0 && cu.n ? cu.p50 / cl.p50 : 0;
  const unsigned cpus = std::thread::hardware_concurrency();

  if (o.json) {
    nlohmann::json j = {
        {"iterations", o.iterations},
        {"gap_ms", o.gap_ms},
        {"image_bytes", s.image_bytes},
        {"create_exec_p50_ms", c.p50},
        {"create_exec_p99_ms", c.p99},
        {"create_p50_ms", cr.p50},
        {"create_exec_only_p50_ms", Summarize(create_exec).p50},
        {"exec_p50_ms", ex.p50},
        {"destroy_p50_ms", de.p50},
        {"per_s", per_s},
        {"per_s_serial", per_s_serial},
        {"per_s_workers", per_s_workers},
        {"workers", o.workers},
        {"per_s_mode", per_s_mode},
        {"idle_kib", idle_kib},
        {"idle_method", idle->method},
        {"idle_sandboxes", o.idle},
        {"idle_host_kib", idle->host_kib},
        {"idle_kernel_kib", idle->kernel_kib},
        {"cpus", cpus},
        {"state_on_disk", o.state_on_disk},
        {"init_pool", pool_target},
        {"init_pool_taken_latency", lat_pool.taken},
        {"init_pool_misses_latency", lat_pool.misses},
        {"init_pool_taken", pool_stats.taken},
        {"init_pool_misses", pool_stats.misses},
    };
    if (nc.n) {
      j["network_create_p50_ms"] = nc.p50;
      j["network_create_p99_ms"] = nc.p99;
      j["tier_create_p50_ms"] = tc.p50;
      j["tier_destroy_p50_ms"] = td.p50;
      j["network_create_extra_p50_ms"] = nc.p50 - tc.p50;
      j["network_destroy_p50_ms"] = nd.p50;
      j["network_policies_loaded_on_create"] = net_inline;
      j["network_netns_wired_on_create"] = wired_inline;
    }
    j["idle_sandbox_cgroup_kib"] =
        idle->sandbox_cgroup_kib ? nlohmann::json(*idle->sandbox_cgroup_kib) : nlohmann::json();
    if (cl.n) {
      j["cli_p50_ms"] = cl.p50;
      j["cli_p99_ms"] = cl.p99;
    }
    if (cu.n) {
      j["crun_p50_ms"] = cu.p50;
      j["crun_p99_ms"] = cu.p99;
      j["ratio"] = ratio;
      if (cl.n) j["cli_ratio"] = cli_ratio;
    } else {
      j["crun_p50_ms"] = nullptr;
      j["crun_note"] = crun_note;
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("bench container: busybox-static root (EROFS image %llu KiB), %d iterations, %u CPUs%s\n",
              static_cast<unsigned long long>(s.image_bytes / 1024), o.iterations, cpus,
              o.gap_ms > 0 ? absl::StrCat(", each run ", o.gap_ms, " ms after the last").c_str() : "");
  std::printf("%-40s %9s %9s %9s\n", "", "p50 ms", "p99 ms", "mean ms");
  auto row = [](const char* name, const LatencySummary& l) {
    std::printf("%-40s %9s %9s %9s\n", name, Ms(l.p50).c_str(), Ms(l.p99).c_str(),
                Ms(l.mean).c_str());
  };
  row("  create", cr);
  row("  exec true", ex);
  row("  destroy", de);
  row("  create+exec (without destroy)", Summarize(create_exec));
  row("create+exec+destroy (in process)", c);
  if (pool_target > 0) {
    std::printf("  (made-ahead inits: %zu kept; the timed creates took %llu, found none %llu times;"
                " sustained runs took %llu more, found none %llu times)\n",
                pool_target, static_cast<unsigned long long>(lat_pool.taken),
                static_cast<unsigned long long>(lat_pool.misses),
                static_cast<unsigned long long>(pool_stats.taken - lat_pool.taken),
                static_cast<unsigned long long>(pool_stats.misses - lat_pool.misses));
  } else {
    std::printf("  (no made-ahead inits: DSEC_INIT_POOL=0)\n");
  }
  if (nc.n) {
    std::printf("through the container tier (cgroup v2 directory and device policy per sandbox):\n");
    row("  create", tc);
    row("  create with a network", nc);
    row("  destroy", td);
    row("  destroy with a network", nd);
    std::printf("  a network adds %.3f ms to the tier's create p50 (target <= 1 ms); %llu of its policies loaded "
                "and %llu of its namespaces wired on create (the rest made ahead)\n",
                nc.p50 - tc.p50, static_cast<unsigned long long>(net_inline),
                static_cast<unsigned long long>(wired_inline));
  }
  if (cl.n) row("dsec-vmm sandbox run -- true (process)", cl);
  if (cu.n) {
    row("crun run (process)", cu);
    std::printf("crun / container tier, p50: %.2fx (target >= 2x)%s\n", ratio,
                cl.n ? absl::StrCat("; crun / CLI: ", Ms(cli_ratio), "x").c_str() : "");
  } else {
    std::printf("crun: not measured (%s)\n", crun_note.c_str());
  }
  std::printf("sustained: %.0f/s serial, %.0f/s with %d workers -> per_s %.0f (%s; target >= 100)\n",
              per_s_serial, per_s_workers, o.workers, per_s, per_s_mode.c_str());
  std::printf("idle sandbox: %.0f KiB (%s, %d sandboxes; target <= 1024)\n", idle_kib,
              idle->method.c_str(), o.idle);
  if (idle->sandbox_cgroup_kib) {
    std::printf("  of which in the sandbox's own memory cgroup: %.0f KiB\n",
                *idle->sandbox_cgroup_kib);
  }
  std::printf("  host-wide cross-check (noisy): MemAvailable drop %.0f KiB, kernel counters %.0f KiB\n",
              idle->host_kib, idle->kernel_kib);
  return 0;
}

}  // namespace dsec::bench
