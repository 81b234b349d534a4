// SPDX-License-Identifier: Apache-2.0
// fncall sandboxes with a network, in the real kernel and with no traffic
// leaving the machine: an "outside world" (a network namespace behind a
// veth the node uses as its uplink, on 198.19.x.0/24) with listeners, a
// fake DNS upstream on loopback for the node resolver, and a fncall
// sandbox made through the tier whose Python calls connect out. Checks
// that every worker has an address of its own under the sandbox's one
// policy, that a policy change reaches every worker (and workers started
// after it), that retired workers' networks go, and that nothing is left
// after destroy (veths, leases, cgroups). Label integration; root.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/clock.h"
#include "base/scoped_fd.h"
#include "gtest/gtest.h"
#include "sandbox/fncall/fncall_testing.h"
#include "sandbox/fncall/fncall_tier.h"
#include "sandbox/fncall/pool.h"
#include "sandbox/network/netlink.h"
#include "sandbox/network/node_network.h"
#include "sandbox/network/policy.h"
#include "sandbox/network/sandbox_network.h"
#include "sandbox/network/test_network.h"

namespace dsec::fncall {
namespace {

// One line per target "HOST,PORT": "ok <our address>", "timeout" or the
// errno name; a target "resolv" prints /etc/resolv.conf's nameserver, and
// "dns,NAME,PORT" connects to NAME's first address as the libc resolver
// finds it (through /etc/resolv.conf).
constexpr char kProbe[] = R"(
import errno, socket, sys
for t in sys.argv[1:]:
    if t == "resolv":
        print(open("/etc/resolv.conf").read().split()[1])
        continue
    f = t.split(",")
    s = socket.socket()
    s.settimeout(5)
    try:
        host = socket.gethostbyname(f[1]) if f[0] == "dns" else f[0]
        s.connect((host, int(f[-1])))
        print("ok " + s.getsockname()[0])
    except socket.timeout:
        print("timeout")
    except socket.gaierror as e:
        print("gaierror")
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e.errno)))
    finally:
        s.close()
)";

using network::testing::FakeUpstream;
using network::testing::NewNetns;
using network::testing::Server;

// Entries of `dir` whose names start with `prefix`.
std::vector<std::string> Entries(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (absl::StartsWith(e->d_name, prefix)) out.push_back(absl::StrCat(dir, "/", e->d_name));
  }
  closedir(d);
  return out;
}

class FncallNetworkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (netlink, nftables, BPF, cgroups)";
    if (access("/sys/fs/cgroup/unified/cgroup.procs", F_OK) != 0 &&
        access("/sys/fs/cgroup/cgroup.controllers", F_OK) != 0) {
      GTEST_SKIP() << "no cgroup v2 hierarchy mounted";
    }
    auto layers = testing::EnsureTestLayers();
    if (!layers.ok()) GTEST_SKIP() << "no fncall test layers: " << layers.status();
    image_ = layers->runtime;
    const int x = getpid() % 250;
    subnet_ = absl::StrCat("10.248.", x, ".0/24");
    host_if_prefix_ = absl::StrFormat("ds%02x%02x%02x", 10, 248, x);
    outside_ = absl::StrCat("198.19.", x, ".2");
    uplink_ = absl::StrCat("dfu", getpid() % 100000);
    outside_ns_ = NewNetns();
    ASSERT_TRUE(outside_ns_.valid()) << strerror(errno);
    auto host = network::NlSocket::Open();
    ASSERT_TRUE(host.ok()) << host.status();
    (void)host->DeleteLink(uplink_);  // a crashed run's
    ASSERT_TRUE(host->AddVeth(uplink_, "eth0", outside_ns_.get()).ok());
    uplink_made_ = true;
    ASSERT_TRUE(host->AddAddress(uplink_, absl::StrCat("198.19.", x, ".1/24")).ok());
    ASSERT_TRUE(host->SetUp(uplink_).ok());
    auto out = network::NlSocket::OpenIn(outside_ns_.get());
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_TRUE(out->AddAddress("eth0", outside_ + "/24").ok());
    ASSERT_TRUE(out->SetUp("eth0").ok());
    upstream_ = std::make_unique<FakeUpstream>(outside_, 300);
    network::NodeNetworkOptions o;
    o.subnet = subnet_;
    o.uplinks = {uplink_};
    o.dns_upstream = absl::StrCat("127.0.0.1:", upstream_->port());
    auto node = network::NodeNetwork::Create(o);
    if (node.status().code() == absl::StatusCode::kUnavailable) GTEST_SKIP() << node.status();
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = std::move(*node);
    char tmpl[] = "/tmp/dsec-fncall-net-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }

  void TearDown() override {
    tier_.reset();
    node_.reset();
    upstream_.reset();
    if (uplink_made_) {
      auto host = network::NlSocket::Open();
      if (host.ok()) (void)host->DeleteLink(uplink_);
    }
    if (!root_.empty()) std::filesystem::remove_all(root_);
  }

  network::NetworkSpec Spec(const std::string& json) {
    auto spec = network::ParseNetworkSpec(nlohmann::json::parse(json));
    EXPECT_TRUE(spec.ok()) << spec.status();
    return spec.ok() ? *spec : network::NetworkSpec{};
  }
  std::string Allow(int port) {
    return absl::StrCat(R"({"egress": {"allow": [")", outside_, ":", port, R"("]}})");
  }

  absl::StatusOr<std::unique_ptr<tier::TierSandbox>> Create(const std::string& spec_json) {
    FncallTierOptions o;
    o.state_root = root_;
    o.max_workers_per_pool = 2;
    o.min_idle = 1;
    if (!tier_) tier_ = std::make_unique<FncallTier>(o);
    tier::CreateSpec s;
    s.id = absl::StrCat("sb-fnnet", getpid());
    s.images = {image_};
    s.options = {{"lang", "python"}};
    s.memory_mib = 256;
    s.pids = 64;
    s.network = std::make_shared<const network::NetworkSpec>(Spec(spec_json));
    s.node_network = node_.get();
    return tier_->Create(s);
  }

  static std::vector<std::string> Call(tier::TierSandbox& sb, const std::vector<std::string>& targets) {
    tier::ExecSpec e;
    e.code = kProbe;
    e.argv = targets;
    e.timeout_ms = 30'000;
    auto r = sb.Exec(e);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    EXPECT_EQ(r->exit_code, 0) << r->stderr_data;
    return absl::StrSplit(absl::StripTrailingAsciiWhitespace(r->stdout_data), '\n');
  }

  // Calls until two different workers (addresses) answered or 10 s went
  // by; every answer must be `want` ("ok" standing for "ok <address>").
  std::set<std::string> CallOnEveryWorker(tier::TierSandbox& sb, const std::vector<std::string>& targets,
                                          const std::vector<std::string>& want, int* calls) {
    std::set<std::string> addresses;
    const int64_t deadline = MonotonicNowNs() + 10'000'000'000;
    while (addresses.size() < 2 && MonotonicNowNs() < deadline) {
      std::vector<std::string> got = Call(sb, targets);
      ++*calls;
      EXPECT_EQ(got.size(), want.size());
      if (got.size() != want.size()) break;
      for (size_t i = 0; i < want.size(); ++i) {
        if (want[i] == "ok") {
          EXPECT_TRUE(absl::StartsWith(got[i], "ok 10.248.")) << got[i];
          addresses.insert(got[i].substr(3));
        } else {
          EXPECT_EQ(got[i], want[i]);
        }
      }
    }
    return addresses;
  }

  // Host ends of this test's subnet.
  std::vector<std::string> HostEnds() { return Entries("/sys/class/net", host_if_prefix_); }
  // The cgroup directories the pools under root_ recorded (state_dir.h),
  // and those of them that exist.
  std::vector<std::string> RecordedCgroups() {
    std::vector<std::string> out;
    for (const auto& pool : std::filesystem::directory_iterator(root_)) {
      std::ifstream in(pool.path() / "cgroups");
      for (std::string line; std::getline(in, line);) {
        if (!line.empty()) out.push_back(line);
      }
    }
    return out;
  }
  static std::vector<std::string> Existing(const std::vector<std::string>& dirs) {
    std::vector<std::string> out;
    for (const std::string& d : dirs) {
      if (access(d.c_str(), F_OK) == 0) out.push_back(d);
    }
    return out;
  }

  std::string image_, root_, subnet_, host_if_prefix_, outside_, uplink_;
  bool uplink_made_ = false;
  ScopedFd outside_ns_;
  std::unique_ptr<FakeUpstream> upstream_;
  std::unique_ptr<network::NodeNetwork> node_;
  std::unique_ptr<FncallTier> tier_;
};

TEST_F(FncallNetworkTest, EveryWorkerHasItsAddressUnderOnePolicyAndNothingIsLeftAfterDestroy) {
  Server a(outside_ns_.get(), outside_), b(outside_ns_.get(), outside_);
  ASSERT_GT(a.port(), 0);
  ASSERT_GT(b.port(), 0);
  auto sb = Create(Allow(a.port()));
  ASSERT_TRUE(sb.ok()) << sb.status();
  std::shared_ptr<network::SandboxNetwork> net = (*sb)->network();
  ASSERT_NE(net, nullptr);
  const std::string ta = absl::StrCat(outside_, ",", a.port()), tb = absl::StrCat(outside_, ",", b.port());

  // The allowed listener is reached, the other refused at once, on each
  // of the (two) workers, each from an address of its own.
  int calls = 0;
  std::set<std::string> seen = CallOnEveryWorker(**sb, {ta, tb}, {"ok", "EPERM"}, &calls);
  EXPECT_EQ(seen.size(), 2u) << "two workers served the calls";
  EXPECT_EQ(node_->leased(), 2u);
  EXPECT_EQ(net->addresses().size(), 2u);
  EXPECT_EQ(HostEnds().size(), 2u);
  auto c = net->Counters();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->connects_allowed, static_cast<uint64_t>(calls)) << "summed over the workers";
  EXPECT_EQ(c->connects_denied, static_cast<uint64_t>(calls));
  EXPECT_GT(c->bytes_out, 0u);

  // The node resolver is the workers' nameserver.
  EXPECT_EQ(Call(**sb, {"resolv"}), (std::vector<std::string>{net->gateway_text()}));

  // The opposite policy (a PATCH): every worker follows at once.
  ASSERT_TRUE(net->SetSpec(Spec(Allow(b.port()))).ok());
  seen = CallOnEveryWorker(**sb, {ta, tb}, {"EPERM", "ok"}, &calls);
  EXPECT_EQ(seen.size(), 2u);

  // Everything goes with the sandbox: veths, leases, cgroups (v2 ones
  // made for the programs included), the pool's state.
  const std::vector<std::string> cgroups = RecordedCgroups();
  EXPECT_FALSE(Existing(cgroups).empty());
  if (access("/sys/fs/cgroup/unified/cgroup.procs", F_OK) == 0) {
    int v2 = 0;
    for (const std::string& d : Existing(cgroups)) v2 += absl::StartsWith(d, "/sys/fs/cgroup/unified/") ? 1 : 0;
    EXPECT_EQ(v2, 2) << "one v2 directory per worker for its programs";
  }
  ASSERT_TRUE((*sb)->Destroy().ok());
  EXPECT_EQ(node_->leased(), 0u);
  EXPECT_TRUE(HostEnds().empty()) << HostEnds()[0];
  EXPECT_TRUE(Existing(cgroups).empty()) << Existing(cgroups)[0];
  EXPECT_TRUE(std::filesystem::is_empty(root_)) << "the pool's state dir went";
  EXPECT_EQ(tier_->pools(), 0) << "a networked sandbox's pool is never kept warm";
  EXPECT_EQ(net->Counters().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(FncallNetworkTest, ADomainRuleResolvesThroughTheNodeResolver) {
  Server a(outside_ns_.get(), outside_), b(outside_ns_.get(), outside_);
  auto sb = Create(absl::StrCat(R"({"egress": {"allow": ["pkg.example.test:)", a.port(), R"("]}})"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  // Before the name is resolved its address is not allowed; the resolver
  // answers only the allowed name.
  std::vector<std::string> r =
      Call(**sb, {absl::StrCat(outside_, ",", a.port()), absl::StrCat("dns,pkg.example.test,", a.port()),
                  absl::StrCat("dns,pkg.example.test,", b.port()), absl::StrCat("dns,other.example.test,", a.port())});
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0], "EPERM");
  EXPECT_TRUE(absl::StartsWith(r[1], "ok 10.248.")) << r[1];
  EXPECT_EQ(r[2], "EPERM") << "the rule's port only";
  EXPECT_EQ(r[3], "gaierror") << "a name no rule allows is refused";
  ASSERT_TRUE((*sb)->Destroy().ok());
  EXPECT_EQ(node_->leased(), 0u);
}

TEST_F(FncallNetworkTest, AWorkerStartedAfterAChangeGetsItAndARetiredOneLeavesNothing) {
  // A pool of the test's own, whose idle workers retire quickly.
  Server a(outside_ns_.get(), outside_), b(outside_ns_.get(), outside_);
  auto n = network::SandboxNetwork::CreateShared(node_.get(), Spec(Allow(a.port())));
  ASSERT_TRUE(n.ok()) << n.status();
  std::shared_ptr<network::SandboxNetwork> net = std::move(*n);
  PoolConfig c;
  c.id = absl::StrCat("d", getpid(), "-retire");
  c.layers = {image_};
  c.language = Language::kPython;
  c.state_root = root_;
  c.limits.memory_bytes = 96 << 20;
  c.limits.pids = 32;
  c.max_workers = 1;
  c.min_idle = 0;
  c.idle_timeout_ms = 50;
  c.network = net;
  auto pool = Pool::Create(c);
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto call = [&]() -> std::vector<std::string> {
    CallRequest req;
    req.code = kProbe;
    req.args = {absl::StrCat(outside_, ",", a.port()), absl::StrCat(outside_, ",", b.port())};
    auto r = (*pool)->Call(req);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    std::vector<std::string> lines = absl::StrSplit(absl::StripTrailingAsciiWhitespace(r->stdout_data), '\n');
    for (std::string& l : lines) {
      if (absl::StartsWith(l, "ok ")) l = "ok";
    }
    return lines;
  };
  EXPECT_EQ(call(), (std::vector<std::string>{"ok", "EPERM"}));
  ASSERT_TRUE(net->SetSpec(Spec(Allow(b.port()))).ok());
  // The idle worker retires (the refill thread looks once a second): its
  // address, veth and cgroups go. (The pool tells no one when a retired
  // worker is gone: looked at every 50 ms, up to a deadline.)
  const std::vector<std::string> first_cgroups = RecordedCgroups();
  EXPECT_FALSE(Existing(first_cgroups).empty());
  const int64_t deadline = MonotonicNowNs() + 10'000'000'000;
  while (((*pool)->Stats().workers_retired == 0 || node_->leased() != 0 || !Existing(first_cgroups).empty()) &&
         MonotonicNowNs() < deadline) {
    usleep(50'000);
  }
  ASSERT_EQ((*pool)->Stats().workers_retired, 1u);
  EXPECT_EQ(node_->leased(), 0u);
  EXPECT_TRUE(HostEnds().empty());
  EXPECT_TRUE(Existing(first_cgroups).empty());
  // The next worker joins with the policy as it is now.
  EXPECT_EQ(call(), (std::vector<std::string>{"EPERM", "ok"}));
  EXPECT_EQ((*pool)->Stats().workers_started, 2u);
  const std::vector<std::string> all_cgroups = RecordedCgroups();
  ASSERT_TRUE((*pool)->Destroy().ok());
  EXPECT_EQ(node_->leased(), 0u);
  EXPECT_TRUE(HostEnds().empty());
  EXPECT_TRUE(Existing(all_cgroups).empty());
}

}  // namespace
}  // namespace dsec::fncall
