// SPDX-License-Identifier: Apache-2.0
#include "bench/net_bench.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/clock.h"
#include "base/status.h"
#include "bench/net_bench_env.h"
#include "bench/net_host_stats.h"
#include "bench/net_probe.h"
#include "bench/percentile.h"
#include "bpf/egress_policy.h"
#include "nlohmann/json.hpp"
#include "sandbox/network/nft.h"
#include "sandbox/network/policy.h"

namespace dsec::bench {
namespace {

using net::BulkResult;
using net::ClientPlace;
using net::ConnectSample;
using net::FakeSandbox;
using net::HostStats;
using net::NetBenchEnv;

constexpr int kConnectRounds = 10;
// Descriptors a fake networked sandbox holds in this process: its
// namespace and 15 of BPF (5 programs, 5 links, 5 maps; fds_per_sandbox
// shows it), and one to spare.
constexpr int64_t kFdsPerSandbox = 17;

std::atomic<bool> g_interrupted{false};
void OnSignal(int) { g_interrupted.store(true); }

absl::Status Interrupted() {
  return g_interrupted.load() ? absl::CancelledError("interrupted") : absl::OkStatus();
}

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

const char* ErrnoName(int err) {
  if (err == 0) return "connected";
  const char* n = strerrorname_np(err);
  return n != nullptr ? n : "?";
}

// ---- 1. setup as N grows ---------------------------------------------

struct SetupStep {
  int n = 0;
  std::vector<double> namespace_ms, create_ms, destroy_ms;
  double create_last_tenth_p50_ms = 0;
  // Per networked sandbox (the growth while the N networks were made).
  double mem_available_kib = 0, slab_kib = 0, sunreclaim_kib = 0, percpu_kib = 0, bpf_memlock_kib = 0,
         fds = 0, bpf_fds = 0, rss_kib = 0;
  int64_t fds_left = 0, bpf_fds_left = 0;  // after destruction, vs before creation: 0
  bool first_and_last_reach_outside = false;
};

absl::StatusOr<network::NetworkSpec> AllowSpec(const std::string& address, const std::vector<int>& ports) {
  nlohmann::json allow = nlohmann::json::array();
  for (int p : ports) allow.push_back(absl::StrCat(address, ":", p));
  return network::ParseNetworkSpec(nlohmann::json{{"egress", {{"allow", allow}}}});
}

absl::StatusOr<bool> Reaches(const FakeSandbox& sb, const std::string& address, int port, int listener) {
  DSEC_ASSIGN_OR_RETURN(std::vector<ConnectSample> s,
                        net::ConnectLoop({sb.netns.get(), sb.cgroup->path()}, listener, address, port, 1));
  return s[0].err == 0;
}

absl::StatusOr<SetupStep> MeasureSetup(NetBenchEnv& env, int n, const network::NetworkSpec& spec,
                                       const std::string& outside, int port, int listener) {
  SetupStep step;
  step.n = n;
  DSEC_ASSIGN_OR_RETURN(HostStats now, net::ReadHostStats());
  DSEC_RETURN_IF_ERROR(net::EnsureFdLimit(now.fds + n * kFdsPerSandbox + 256));
  std::vector<std::unique_ptr<FakeSandbox>> sandboxes;
  sandboxes.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    DSEC_RETURN_IF_ERROR(Interrupted());
    const int64_t t0 = MonotonicNowNs();
    DSEC_ASSIGN_OR_RETURN(auto sb, env.NewSandbox(absl::StrCat("n", n, "-", i)));
    step.namespace_ms.push_back(Ms(MonotonicNowNs() - t0));
    sandboxes.push_back(std::move(sb));
  }
  DSEC_ASSIGN_OR_RETURN(HostStats before, net::ReadHostStats());
  for (auto& sb : sandboxes) {
    DSEC_RETURN_IF_ERROR(Interrupted());
    const int64_t t0 = MonotonicNowNs();
    absl::StatusOr<std::unique_ptr<network::SandboxNetwork>> net =
        network::SandboxNetwork::Create(env.node(), sb->netns.get(), sb->cgroup->path(), spec);
    const int64_t t1 = MonotonicNowNs();
    if (!net.ok()) {
      return Annotate(net.status(), absl::StrCat("SandboxNetwork::Create #", step.create_ms.size() + 1, " of ", n));
    }
    sb->network = std::move(*net);
    step.create_ms.push_back(Ms(t1 - t0));
  }
  DSEC_ASSIGN_OR_RETURN(HostStats after, net::ReadHostStats());
  const double d = n;
  step.mem_available_kib = static_cast<double>(before.mem_available_kib - after.mem_available_kib) / d;
  step.slab_kib = static_cast<double>(after.slab_kib - before.slab_kib) / d;
  step.sunreclaim_kib = static_cast<double>(after.sunreclaim_kib - before.sunreclaim_kib) / d;
  step.percpu_kib = static_cast<double>(after.percpu_kib - before.percpu_kib) / d;
  step.bpf_memlock_kib = static_cast<double>(after.bpf_memlock_bytes - before.bpf_memlock_bytes) / 1024.0 / d;
  step.fds = static_cast<double>(after.fds - before.fds) / d;
  step.bpf_fds = static_cast<double>(after.bpf_fds - before.bpf_fds) / d;
  step.rss_kib = static_cast<double>(after.rss_kib - before.rss_kib) / d;
  const size_t tenth = std::max<size_t>(1, step.create_ms.size() / 10);
  step.create_last_tenth_p50_ms =
      Percentile(std::vector<double>(step.create_ms.end() - static_cast<long>(tenth), step.create_ms.end()), 50);
  // The oldest and the newest of the N still work.
  DSEC_ASSIGN_OR_RETURN(bool first, Reaches(*sandboxes.front(), outside, port, listener));
  DSEC_ASSIGN_OR_RETURN(bool last, Reaches(*sandboxes.back(), outside, port, listener));
  step.first_and_last_reach_outside = first && last;
  for (auto& sb : sandboxes) {
    const int64_t t0 = MonotonicNowNs();
    sb->network.reset();
    step.destroy_ms.push_back(Ms(MonotonicNowNs() - t0));
  }
  DSEC_ASSIGN_OR_RETURN(HostStats gone, net::ReadHostStats());
  step.fds_left = gone.fds - before.fds;
  step.bpf_fds_left = gone.bpf_fds - before.bpf_fds;
  return step;
}

// 10, 100, 1000 ... up to `max`, and `max` itself.
std::vector<int> Steps(int max) {
  std::vector<int> steps;
  for (int64_t n = 10; n <= max; n *= 10) steps.push_back(static_cast<int>(n));
  if (steps.empty() || steps.back() != max) steps.push_back(max);
  return steps;
}

// The part of Create that loads and attaches the egress programs (each
// sandbox loads its own copy: its maps are the programs' maps), and of
// destruction that detaches them, alone: `n` times on a cgroup of its own.
struct BpfCost {
  std::vector<double> load_ms, attach_ms, detach_ms;
};
absl::StatusOr<BpfCost> MeasureBpf(NetBenchEnv& env, int n) {
  BpfCost c;
  DSEC_ASSIGN_OR_RETURN(auto cgroup, env.NewCgroup("bpf-only"));
  for (int i = 0; i < n; ++i) {
    DSEC_RETURN_IF_ERROR(Interrupted());
    const int64_t t0 = MonotonicNowNs();
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<bpf::EgressPolicy> p, bpf::EgressPolicy::Load());
    const int64_t t1 = MonotonicNowNs();
    DSEC_RETURN_IF_ERROR(p->AttachToCgroup(cgroup->path()));
    const int64_t t2 = MonotonicNowNs();
    p.reset();
    c.load_ms.push_back(Ms(t1 - t0));
    c.attach_ms.push_back(Ms(t2 - t1));
    c.detach_ms.push_back(Ms(MonotonicNowNs() - t2));
  }
  return c;
}

// ---- 2. and 3. traffic ---------------------------------------------

// A client variant: where it runs and whom it talks to.
struct Variant {
  const char* key = "";    // JSON key part
  const char* label = "";  // text
  ClientPlace place;
  std::string address;
  int connect_port = 0, connect_listener = -1;
  int bulk_port = 0, bulk_listener = -1;
  std::vector<double> connect_us;
  int connect_failures = 0;
  int first_failure = 0;
  std::vector<double> gbyte_s;
};

struct Denied {
  Denied(const char* k, const char* l, ClientPlace p) : key(k), label(l), place(std::move(p)) {}
  const char* key;
  const char* label;
  ClientPlace place;
  std::vector<double> us;
  std::map<int, int> errnos;  // errno -> count
  int MostCommon() const {
    int best = 0, count = -1;
    for (auto [e, c] : errnos) {
      if (c > count) best = e, count = c;
    }
    return best;
  }
};

absl::Status MeasureConnects(std::vector<Variant>& variants, std::vector<Denied>& denied,
                             const std::string& outside, int denied_port, int connects) {
  const int per_round = std::max(1, connects / kConnectRounds);
  for (Variant& v : variants) {  // warm-up: ARP, conntrack, code paths
    DSEC_RETURN_IF_ERROR(
        net::ConnectLoop(v.place, v.connect_listener, v.address, v.connect_port, 20).status());
  }
  for (int round = 0; round < kConnectRounds; ++round) {
    // A different variant first in each round.
    for (size_t k = 0; k < variants.size(); ++k) {
      DSEC_RETURN_IF_ERROR(Interrupted());
      Variant& v = variants[(k + static_cast<size_t>(round)) % variants.size()];
      DSEC_ASSIGN_OR_RETURN(std::vector<ConnectSample> s,
                            net::ConnectLoop(v.place, v.connect_listener, v.address, v.connect_port, per_round));
      for (const ConnectSample& c : s) {
        if (c.err != 0) {
          if (v.connect_failures++ == 0) v.first_failure = c.err;
          continue;
        }
        v.connect_us.push_back(static_cast<double>(c.ns) / 1e3);
      }
    }
    for (Denied& d : denied) {
      DSEC_ASSIGN_OR_RETURN(std::vector<ConnectSample> s,
                            net::ConnectLoop(d.place, -1, outside, denied_port, per_round));
      for (const ConnectSample& c : s) {
        d.us.push_back(static_cast<double>(c.ns) / 1e3);
        ++d.errnos[c.err];
      }
    }
  }
  return absl::OkStatus();
}

absl::Status MeasureThroughput(std::vector<Variant>& variants, uint64_t bytes, int rounds) {
  for (int round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < variants.size(); ++k) {
      DSEC_RETURN_IF_ERROR(Interrupted());
      Variant& v = variants[(k + static_cast<size_t>(round)) % variants.size()];
      absl::StatusOr<BulkResult> r = net::BulkTransfer(v.place, v.bulk_listener, v.address, v.bulk_port, bytes);
      if (!r.ok()) return Annotate(r.status(), absl::StrCat("bulk transfer, ", v.label));
      v.gbyte_s.push_back(r->GBytesPerSecond());
    }
  }
  return absl::OkStatus();
}

// The peer's filter: the same allow list as the BPF policy (loopback, the
// node resolver, outside:ports), in the sandbox's namespace, the rest
// rejected at once (TCP reset, ICMP admin-prohibited) as a runtime that
// enforces egress with nftables would; made from a thread in that namespace.
absl::Status InstallNftPeer(int netns_fd, const std::string& gateway, const std::string& outside,
                            const std::vector<int>& ports) {
  const std::string rules = absl::StrCat(
      "table inet dsec_bench_egress {\n"
      "  chain output {\n"
      "    type filter hook output priority filter; policy accept;\n"
      "    oifname \"lo\" accept\n"
      "    ip daddr ", gateway, " th dport 53 accept\n"
      "    ip daddr ", outside, " th dport { ", absl::StrJoin(ports, ", "), " } accept\n"
      "    meta l4proto tcp reject with tcp reset\n"
      "    reject with icmpx admin-prohibited\n"
      "  }\n"
      "}\n");
  absl::Status status;
  std::thread([&] {
    status = ::setns(netns_fd, CLONE_NEWNET) == 0 ? network::RunNft(rules) : ErrnoStatus("setns");
  }).join();
  return Annotate(status, "nftables peer");
}

// ---- output ----------------------------------------------------------

struct Results {
  std::string outside, uplink, subnet;
  std::vector<SetupStep> steps;
  BpfCost bpf;
  std::vector<Variant> variants;  // loopback, plain, bpf, nft
  std::vector<Denied> denied;     // bpf, nft
  int connects = 0;
  uint64_t bulk_bytes = 0;
  int bulk_rounds = 0;
};

constexpr char kScope[] =
    "sandbox networks only: each sandbox is a fresh network namespace + a cgroup v2 directory of the "
    "bench, no container, so the figures are sandbox/network's own cost";

nlohmann::json Json(const Results& r) {
  nlohmann::json j;
  j["scope"] = kScope;
  j["subnet"] = r.subnet;
  j["outside"] = r.outside;
  nlohmann::json steps = nlohmann::json::array();
  for (const SetupStep& s : r.steps) {
    steps.push_back({{"n", s.n},
                     {"namespace_p50_ms", Percentile(s.namespace_ms, 50)},
                     {"create_p50_ms", Percentile(s.create_ms, 50)},
                     {"create_p99_ms", Percentile(s.create_ms, 99)},
                     {"create_last_tenth_p50_ms", s.create_last_tenth_p50_ms},
                     {"destroy_p50_ms", Percentile(s.destroy_ms, 50)},
                     {"destroy_p99_ms", Percentile(s.destroy_ms, 99)},
                     {"mem_available_kib_per_sandbox", s.mem_available_kib},
                     {"slab_kib_per_sandbox", s.slab_kib},
                     {"sunreclaim_kib_per_sandbox", s.sunreclaim_kib},
                     {"percpu_kib_per_sandbox", s.percpu_kib},
                     {"bpf_memlock_kib_per_sandbox", s.bpf_memlock_kib},
                     {"fds_per_sandbox", s.fds},
                     {"bpf_fds_per_sandbox", s.bpf_fds},
                     {"bench_rss_kib_per_sandbox", s.rss_kib},
                     {"fds_left_after_destroy", s.fds_left},
                     {"bpf_fds_left_after_destroy", s.bpf_fds_left},
                     {"first_and_last_reach_outside", s.first_and_last_reach_outside}});
  }
  j["setup"] = steps;
  j["bpf_load_p50_ms"] = Percentile(r.bpf.load_ms, 50);
  j["bpf_attach_p50_ms"] = Percentile(r.bpf.attach_ms, 50);
  j["bpf_detach_p50_ms"] = Percentile(r.bpf.detach_ms, 50);
  const double first = Percentile(r.steps.front().create_ms, 50);
  j["create_p50_growth"] = first > 0 ? Percentile(r.steps.back().create_ms, 50) / first : 0;
  j["connects_per_variant"] = r.connects;
  for (const Variant& v : r.variants) {
    j[absl::StrCat("connect_", v.key, "_p50_us")] = Percentile(v.connect_us, 50);
    j[absl::StrCat("connect_", v.key, "_p99_us")] = Percentile(v.connect_us, 99);
    j[absl::StrCat("connect_", v.key, "_failures")] = v.connect_failures;
    j[absl::StrCat("throughput_", v.key, "_gbyte_s")] = Percentile(v.gbyte_s, 50);
  }
  for (const Denied& d : r.denied) {
    j[absl::StrCat("denied_", d.key, "_p50_us")] = Percentile(d.us, 50);
    j[absl::StrCat("denied_", d.key, "_p99_us")] = Percentile(d.us, 99);
    j[absl::StrCat("denied_", d.key, "_errno")] = ErrnoName(d.MostCommon());
    j[absl::StrCat("denied_", d.key, "_errno_count")] = d.errnos.at(d.MostCommon());
  }
  const auto p50 = [&](size_t i) { return Percentile(r.variants[i].connect_us, 50); };
  const auto tp = [&](size_t i) { return Percentile(r.variants[i].gbyte_s, 50); };
  j["connect_bpf_added_us"] = p50(2) - p50(1);
  j["connect_nft_added_us"] = p50(3) - p50(1);
  j["throughput_bytes"] = r.bulk_bytes;
  j["throughput_rounds"] = r.bulk_rounds;
  j["throughput_ratio_bpf_plain"] = tp(2) / tp(1);
  j["throughput_ratio_nft_plain"] = tp(3) / tp(1);
  j["throughput_ratio_bpf_nft"] = tp(2) / tp(3);
  return j;
}

void PrintText(const Results& r) {
  printf("bench net: %s.\nsubnet %s, outside %s behind veth %s (the node's only uplink; nothing leaves the "
         "machine)\n\n",
         kScope, r.subnet.c_str(), r.outside.c_str(), r.uplink.c_str());
  printf("1. setup as live networked sandboxes grow (times in ms; memory per networked sandbox, KiB)\n");
  printf("%7s %8s %8s %8s %9s %8s %8s %9s %7s %7s %7s %8s %6s %7s %s\n", "N", "ns+cg", "create", "p99",
         "last10%", "destroy", "p99", "MemAvail", "slab", "unrecl", "percpu", "bpf-mlk", "fds", "ourRSS",
         "reach");
  for (const SetupStep& s : r.steps) {
    printf("%7d %8.3f %8.3f %8.3f %9.3f %8.3f %8.3f %9.1f %7.1f %7.1f %7.1f %8.1f %6.1f %7.1f %s\n", s.n,
           Percentile(s.namespace_ms, 50), Percentile(s.create_ms, 50), Percentile(s.create_ms, 99),
           s.create_last_tenth_p50_ms, Percentile(s.destroy_ms, 50), Percentile(s.destroy_ms, 99),
           s.mem_available_kib, s.slab_kib, s.sunreclaim_kib, s.percpu_kib, s.bpf_memlock_kib, s.fds, s.rss_kib,
           s.first_and_last_reach_outside ? "yes" : "NO");
  }
  printf("  ns+cg = making the fake sandbox (namespace, lo up, cgroup dir), not part of create; create/destroy\n"
         "  = SandboxNetwork::Create / its destruction (p50 unless p99); last10%% = create p50 of the last\n"
         "  tenth (population ~N); ourRSS = this process's RSS growth; reach = first and last reach outside.\n");
  const double g = Json(r)["create_p50_growth"];
  printf("  create p50 at N=%d / at N=%d: %.2fx; descriptors left after destroy: %lld\n", r.steps.back().n,
         r.steps.front().n, g, static_cast<long long>(r.steps.back().fds_left));
  printf("  of which the egress programs alone (%zu times): load p50 %.3f ms, attach %.3f ms; detach %.3f ms\n\n",
         r.bpf.load_ms.size(), Percentile(r.bpf.load_ms, 50), Percentile(r.bpf.attach_ms, 50),
         Percentile(r.bpf.detach_ms, 50));
  printf("2. TCP connect+close to a listener outside (%d per variant, %d interleaved rounds)\n", r.connects,
         kConnectRounds);
  for (const Variant& v : r.variants) {
    printf("  %-44s p50 %8.1f us  p99 %8.1f us", v.label, Percentile(v.connect_us, 50),
           Percentile(v.connect_us, 99));
    if (v.connect_failures) printf("  (%d failed: %s)", v.connect_failures, ErrnoName(v.first_failure));
    printf("\n");
  }
  for (const Denied& d : r.denied) {
    printf("  %-44s p50 %8.1f us  p99 %8.1f us  %s (%d of %zu)\n", d.label, Percentile(d.us, 50),
           Percentile(d.us, 99), ErrnoName(d.MostCommon()), d.errnos.at(d.MostCommon()), d.us.size());
  }
  const double added = Percentile(r.variants[2].connect_us, 50) - Percentile(r.variants[1].connect_us, 50);
  printf("  egress policy adds %.1f us to the p50 (target <= 5 us: %s)\n\n", added, added <= 5 ? "met" : "not met");
  printf("3. TCP bulk sandbox -> outside, %.2f GiB per run, median of %d interleaved runs\n",
         static_cast<double>(r.bulk_bytes) / (1 << 30), r.bulk_rounds);
  for (const Variant& v : r.variants) {
    printf("  %-44s %6.2f GB/s  (%5.1f Gbit/s)\n", v.label, Percentile(v.gbyte_s, 50),
           Percentile(v.gbyte_s, 50) * 8);
  }
  const auto tp = [&](size_t i) { return Percentile(r.variants[i].gbyte_s, 50); };
  printf("  ratios: BPF / no programs %.3f, nftables / no programs %.3f, BPF / nftables %.3f\n", tp(2) / tp(1),
         tp(3) / tp(1), tp(2) / tp(3));
  printf("  through the veth with the policy: target >= 1 GB/s: %s\n", tp(2) >= 1 ? "met" : "not met");
  const double c = Percentile(r.steps.front().create_ms, 50);
  printf("  SandboxNetwork::Create p50 at N=%d: %.3f ms (target: create with network <= 1 ms slower: %s)\n",
         r.steps.front().n, c, c <= 1 ? "met" : "not met");
}

absl::Status Run(const NetBenchOptions& o, Results& r) {
  net::NetBenchEnvOptions eo;
  eo.subnet = o.subnet;
  eo.outside_subnet = o.outside_subnet;
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<NetBenchEnv> env, NetBenchEnv::Create(eo));
  {
    // The largest step must fit in the descriptor limit: refuse now, not
    // after the traffic figures.
    DSEC_ASSIGN_OR_RETURN(HostStats now, net::ReadHostStats());
    DSEC_RETURN_IF_ERROR(net::EnsureFdLimit(now.fds + o.max * kFdsPerSandbox + 256));
  }
  r.outside = env->outside_address();
  r.uplink = env->uplink();
  r.subnet = o.subnet;
  const std::string& outside = r.outside;
  int connect_port = 0, bulk_port = 0, denied_port = 0;
  DSEC_ASSIGN_OR_RETURN(ScopedFd connect_l, net::ListenIn(env->outside_netns(), outside, &connect_port));
  DSEC_ASSIGN_OR_RETURN(ScopedFd bulk_l, net::ListenIn(env->outside_netns(), outside, &bulk_port));
  // Listening, so that only the policy can refuse it.
  DSEC_ASSIGN_OR_RETURN(ScopedFd denied_l, net::ListenIn(env->outside_netns(), outside, &denied_port));
  DSEC_ASSIGN_OR_RETURN(network::NetworkSpec spec, AllowSpec(outside, {connect_port, bulk_port}));

  // Sandbox A: the policy's clients run in its cgroup, the policy-free
  // ones in a sibling cgroup in the same namespace. Sandbox B: the same
  // network, and the nftables peer in its namespace, its clients in the
  // policy-free cgroup.
  DSEC_ASSIGN_OR_RETURN(auto plain, env->NewCgroup("plain"));
  DSEC_ASSIGN_OR_RETURN(auto a, env->NewSandbox("a"));
  DSEC_ASSIGN_OR_RETURN(a->network,
                        network::SandboxNetwork::Create(env->node(), a->netns.get(), a->cgroup->path(), spec));
  DSEC_ASSIGN_OR_RETURN(auto b, env->NewSandbox("b"));
  DSEC_ASSIGN_OR_RETURN(b->network,
                        network::SandboxNetwork::Create(env->node(), b->netns.get(), b->cgroup->path(), spec));
  DSEC_RETURN_IF_ERROR(InstallNftPeer(b->netns.get(), a->network->gateway_text(), outside, {connect_port, bulk_port}));
  int lo_connect_port = 0, lo_bulk_port = 0;
  DSEC_ASSIGN_OR_RETURN(ScopedFd lo_connect_l, net::ListenIn(a->netns.get(), "127.0.0.1", &lo_connect_port));
  DSEC_ASSIGN_OR_RETURN(ScopedFd lo_bulk_l, net::ListenIn(a->netns.get(), "127.0.0.1", &lo_bulk_port));

  const ClientPlace in_a_plain{a->netns.get(), plain->path()}, in_a_policy{a->netns.get(), a->cgroup->path()},
      in_b_plain{b->netns.get(), plain->path()};
  auto variant = [&](const char* key, const char* label, ClientPlace place, bool loopback) {
    Variant v;
    v.key = key;
    v.label = label;
    v.place = std::move(place);
    v.address = loopback ? "127.0.0.1" : outside;
    v.connect_port = loopback ? lo_connect_port : connect_port;
    v.connect_listener = loopback ? lo_connect_l.get() : connect_l.get();
    v.bulk_port = loopback ? lo_bulk_port : bulk_port;
    v.bulk_listener = loopback ? lo_bulk_l.get() : bulk_l.get();
    return v;
  };
  r.variants.push_back(variant("loopback", "sandbox's own loopback (no veth)", in_a_plain, true));
  r.variants.push_back(variant("plain", "veth + NAT, no programs", in_a_plain, false));
  r.variants.push_back(variant("bpf", "veth + NAT, egress policy (BPF) allows", in_a_policy, false));
  r.variants.push_back(variant("nft", "veth + NAT, nftables filter allows (peer)", in_b_plain, false));
  r.denied.emplace_back("bpf", "denied by the egress policy (BPF)", in_a_policy);
  r.denied.emplace_back("nft", "denied by the nftables filter (reject)", in_b_plain);
  r.connects = o.connects;
  r.bulk_bytes = o.bulk_bytes;
  r.bulk_rounds = o.bulk_rounds;
  // Traffic first: the setup steps leave the kernel freeing namespaces.
  DSEC_RETURN_IF_ERROR(MeasureConnects(r.variants, r.denied, outside, denied_port, o.connects));
  DSEC_RETURN_IF_ERROR(MeasureThroughput(r.variants, o.bulk_bytes, o.bulk_rounds));
  a.reset();
  b.reset();
  DSEC_ASSIGN_OR_RETURN(r.bpf, MeasureBpf(*env, 50));
  for (int n : Steps(o.max)) {
    DSEC_ASSIGN_OR_RETURN(SetupStep s, MeasureSetup(*env, n, spec, outside, connect_port, connect_l.get()));
    r.steps.push_back(std::move(s));
    DSEC_RETURN_IF_ERROR(Interrupted());  // a signal during the destroys
  }
  return absl::OkStatus();
}

}  // namespace

int RunNetBench(const NetBenchOptions& o) {
  struct sigaction sa {}, old_int{}, old_term{};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  Results r;
  absl::Status s = Run(o, r);  // everything it made is gone when it returns
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (!s.ok()) {
    fprintf(stderr, "bench net: %s\n", s.ToString().c_str());
    if (absl::IsPermissionDenied(s)) return 2;
    return absl::IsCancelled(s) ? 130 : 1;
  }
  if (o.json) {
    printf("%s\n", Json(r).dump().c_str());
  } else {
    PrintText(r);
  }
  int failures = 0;
  for (const Variant& v : r.variants) failures += v.connect_failures;
  return failures == 0 ? 0 : 1;
}

}  // namespace dsec::bench
