// SPDX-License-Identifier: Apache-2.0
// Runs the real `dsec-vmm bench net --max 10 --json` briefly (label
// integration: root, real namespaces, veths, nftables, BPF and cgroups; no
// traffic leaves the machine) and checks the JSON's shape and sanity, and
// that the run left nothing behind.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/subprocess.h"
#include "bpf/test_cgroup.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace {

using dsec::bpf::OwnCgroup2Dir;  // the bench's child makes its directory below it

std::string MissingPrerequisite() {
  if (::geteuid() != 0) return "needs root (namespaces, netlink, nftables, BPF, cgroups)";
  if (OwnCgroup2Dir().empty()) return "no cgroup v2 hierarchy mounted (BPF cgroup programs)";
  if (::access("/usr/sbin/nft", X_OK) != 0) return "nft missing (apt-get install nftables)";
  return "";
}

double Num(const nlohmann::json& j, const char* key) {
  EXPECT_TRUE(j.contains(key) && j[key].is_number()) << key << " missing or not a number in " << j.dump();
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : -1;
}

TEST(NetBenchCli, JsonHasSaneFiguresAndNothingIsLeftBehind) {
  if (std::string why = MissingPrerequisite(); !why.empty()) GTEST_SKIP() << why;
  // Subnets of this test's own, so that a bench run with the defaults
  // (10.254.0.0/16, 198.19.254.0/24) can run alongside.
  const int x = ::getpid() % 250;
  const int connects = 100;
  dsec::SpawnOptions spawn;
  spawn.argv = {DSEC_VMM_BINARY_PATH, "bench", "net", "--max", "10", "--json",
                "--connects", std::to_string(connects), "--bulk-mib", "64", "--bulk-rounds", "1",
                "--subnet", absl::StrCat("10.252.", x, ".0/24"),
                "--outside-subnet", absl::StrCat("198.19.", x, ".0/24")};
  spawn.out = dsec::Stdio::Capture();
  spawn.err = dsec::Stdio::Capture();
  spawn.capture_max_bytes = 4 << 20;
  auto child = dsec::Subprocess::Spawn(spawn);
  ASSERT_TRUE(child.ok()) << child.status();
  const pid_t pid = child->pid();
  auto r = child->Wait(240'000);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->Succeeded()) << r->Describe() << "\n" << r->err << r->out;

  // Nothing of the run's own is left: its uplink veth and its cgroup
  // directory (its namespaces went with its descriptors).
  EXPECT_NE(::access(absl::StrCat("/sys/class/net/dbnu", pid).c_str(), F_OK), 0);
  EXPECT_NE(::access(absl::StrCat(OwnCgroup2Dir(), "/dsec-bench-net-", pid).c_str(), F_OK), 0);

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(r->out);
  } catch (const nlohmann::json::exception& e) {
    FAIL() << "not JSON: " << e.what() << "\n" << r->out;
  }
  ASSERT_TRUE(j.contains("setup") && j["setup"].is_array() && j["setup"].size() == 1) << j.dump();
  const nlohmann::json& s = j["setup"][0];
  EXPECT_EQ(s["n"], 10);
  const double create = Num(s, "create_p50_ms"), destroy = Num(s, "destroy_p50_ms");
  EXPECT_GT(create, 0.01);  // a BPF load and a veth take more than 10 us
  EXPECT_LT(create, 5000);
  EXPECT_GE(Num(s, "create_p99_ms"), create);
  EXPECT_GT(destroy, 0);
  EXPECT_GE(Num(s, "destroy_p99_ms"), destroy);
  EXPECT_GT(Num(s, "namespace_p50_ms"), 0);
  EXPECT_GT(Num(s, "bpf_memlock_kib_per_sandbox"), 0);  // its own programs and maps
  EXPECT_GE(Num(s, "bpf_fds_per_sandbox"), 5);          // five programs at least
  EXPECT_GE(Num(s, "fds_per_sandbox"), Num(s, "bpf_fds_per_sandbox"));
  Num(s, "mem_available_kib_per_sandbox");  // noisy on a shared host: present, any sign
  Num(s, "slab_kib_per_sandbox");
  Num(s, "percpu_kib_per_sandbox");
  EXPECT_EQ(Num(s, "fds_left_after_destroy"), 0);
  EXPECT_EQ(Num(s, "bpf_fds_left_after_destroy"), 0);
  EXPECT_EQ(s["first_and_last_reach_outside"], true);
  EXPECT_GT(Num(j, "create_p50_growth"), 0);

  for (const char* v : {"loopback", "plain", "bpf", "nft"}) {
    const double p50 = Num(j, absl::StrCat("connect_", v, "_p50_us").c_str());
    EXPECT_GT(p50, 0.5) << v;  // a TCP handshake takes more than 0.5 us
    EXPECT_LT(p50, 100'000) << v;
    EXPECT_GE(Num(j, absl::StrCat("connect_", v, "_p99_us").c_str()), p50) << v;
    EXPECT_EQ(Num(j, absl::StrCat("connect_", v, "_failures").c_str()), 0) << v;
    EXPECT_GT(Num(j, absl::StrCat("throughput_", v, "_gbyte_s").c_str()), 0.001) << v;
  }
  // Denied by the policy: EPERM every time, at once (no retransmitted SYN).
  EXPECT_EQ(j["denied_bpf_errno"], "EPERM");
  EXPECT_EQ(Num(j, "denied_bpf_errno_count"), connects);
  const double denied = Num(j, "denied_bpf_p50_us");
  EXPECT_GT(denied, 0);
  EXPECT_LT(denied, 1000);
  // The nftables peer rejects with a TCP reset.
  EXPECT_EQ(j["denied_nft_errno"], "ECONNREFUSED");
  EXPECT_EQ(Num(j, "denied_nft_errno_count"), connects);
  EXPECT_NEAR(Num(j, "connect_bpf_added_us"), Num(j, "connect_bpf_p50_us") - Num(j, "connect_plain_p50_us"), 1e-6);
  EXPECT_NEAR(Num(j, "throughput_ratio_bpf_plain"),
              Num(j, "throughput_bpf_gbyte_s") / Num(j, "throughput_plain_gbyte_s"), 1e-6);
  EXPECT_GT(Num(j, "throughput_ratio_nft_plain"), 0);
  EXPECT_GT(Num(j, "throughput_ratio_bpf_nft"), 0);
  EXPECT_EQ(Num(j, "connects_per_variant"), connects);
}

}  // namespace
