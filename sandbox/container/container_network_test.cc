// SPDX-License-Identifier: Apache-2.0
// Container sandboxes with a network through the container tier: the
// namespace wired ahead by the node (NodeNetworkOptions::netns_ahead) that
// the sandbox's init joins, with a made-ahead init (the claim passes the
// namespace on the control socket) and without one, and the late path of
// a sandbox in a user namespace. The node network has no uplink; the test
// listens on the gateway (the host ends), so no packet leaves the machine.
// Root (netlink, nftables, BPF, cgroups, mounts); label integration.
#include <arpa/inet.h>
#include <poll.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/file_io.h"
#include "base/scoped_fd.h"
#include "gtest/gtest.h"
#include "sandbox/container/container_tier.h"
#include "sandbox/container/test_image.h"
#include "sandbox/network/node_network.h"
#include "sandbox/network/test_network.h"
#include "sandbox/network/policy.h"
#include "sandbox/network/sandbox_network.h"

namespace dsec::container {
namespace {

using testing::TempDir;

using Listener = network::testing::HostListener;

class ContainerNetworkTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    auto dir = TempDir::Create("dsec-ctr-net-");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<TempDir>(std::move(*dir));
    absl::StatusOr<std::string> image = testing::BuildBusyboxImage(dir_->path());
    if (absl::IsUnavailable(image.status())) GTEST_SKIP() << image.status();
    ASSERT_TRUE(image.ok()) << image.status();
    image_ = *image;
    MakeNodeAndTier(/*netns_ahead=*/2);
  }
  // The node's network (netns_ahead namespaces wired ahead) and the tier
  // over it, replacing any made before.
  void MakeNodeAndTier(size_t netns_ahead) {
    tier_.reset();
    node_.reset();
    network::NodeNetworkOptions no;
    no.subnet = absl::StrCat("10.246.", ::getpid() % 250, ".0/24");
    no.policies_ahead = 2;
    no.netns_ahead = netns_ahead;
    auto node = network::NodeNetwork::Create(no);
    if (!node.ok()) GTEST_SKIP() << "no sandbox networking here: " << node.status();
    node_ = std::move(*node);
    ContainerTierOptions to;
    to.state_root = absl::StrCat(dir_->path(), "/state", ++tiers_made_);
    to.upper_size_bytes = 16 << 20;
    to.init_pool = static_cast<size_t>(GetParam());
    ASSERT_EQ(::mkdir(to.state_root.c_str(), 0700), 0);
    tier_ = std::make_unique<ContainerTier>(to);
  }
  void TearDown() override {
    tier_.reset();
    node_.reset();
  }

  std::unique_ptr<tier::TierSandbox> Create(const std::string& name, const std::string& allow, bool userns) {
    tier::CreateSpec spec;
    spec.id = absl::StrCat("net-", name, "-", ::getpid());
    spec.images = {image_};
    spec.memory_mib = 96;
    spec.pids = 48;
    spec.options = {{"user_namespace", userns}};
    auto ns = network::ParseNetworkSpec(nlohmann::json{{"egress", {{"allow", {allow}}}}});
    EXPECT_TRUE(ns.ok()) << ns.status();
    if (!ns.ok()) return nullptr;
    spec.network = std::make_shared<network::NetworkSpec>(*ns);
    spec.node_network = node_.get();
    auto sb = tier_->Create(spec);
    EXPECT_TRUE(sb.ok()) << sb.status();
    return sb.ok() ? std::move(*sb) : nullptr;
  }
  static tier::ExecOutcome Sh(tier::TierSandbox& sb, const std::string& script) {
    tier::ExecSpec e;
    e.argv = {"sh", "-c", script};
    e.timeout_ms = 30'000;
    auto r = sb.Exec(e);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : tier::ExecOutcome{};
  }
  std::string gateway() const { return network::Ipv4Text(node_->gateway()); }
  // Reaches the allowed listener, is refused at once for the other one,
  // and has the address the network says on its eth0.
  void CheckReachability(tier::TierSandbox& sb, const Listener& allowed, const Listener& other) {
    std::shared_ptr<network::SandboxNetwork> net = sb.network();
    ASSERT_TRUE(net);
    tier::ExecOutcome ip = Sh(sb, "ip -4 addr show eth0");
    EXPECT_TRUE(absl::StrContains(ip.stdout_data, absl::StrCat("inet ", net->address_cidr())))
        << ip.stdout_data << ip.stderr_data;
    tier::ExecOutcome ok = Sh(sb, absl::StrCat("echo hi | nc -w 5 ", gateway(), " ", allowed.port()));
    EXPECT_EQ(ok.exit_code, 0) << ok.stdout_data << ok.stderr_data;
    const int64_t start = MonotonicNowNs();
    tier::ExecOutcome refused = Sh(sb, absl::StrCat("echo hi | nc -w 5 ", gateway(), " ", other.port()));
    EXPECT_NE(refused.exit_code, 0);
    EXPECT_TRUE(absl::StrContains(refused.stdout_data + refused.stderr_data, "Operation not permitted"))
        << refused.stdout_data << refused.stderr_data;
    EXPECT_LT(MonotonicNowNs() - start, 4'000'000'000) << "refused at once, not by a timeout";
  }

  std::unique_ptr<TempDir> dir_;
  std::string image_;
  std::unique_ptr<network::NodeNetwork> node_;
  std::unique_ptr<ContainerTier> tier_;
  int tiers_made_ = 0;
};

TEST_P(ContainerNetworkTest, ASandboxJoinsANamespaceWiredAheadWithItsPolicyOnIt) {
  ASSERT_TRUE(node_->WaitWiredReady(2, MonotonicNowNs() + 20'000'000'000));
  Listener allowed(gateway()), other(gateway());
  ASSERT_GT(allowed.port(), 0);
  ASSERT_GT(other.port(), 0);
  const uint64_t ahead_before = node_->wired_taken_ahead();
  if (GetParam() > 0) {
    ASSERT_TRUE(tier_->WaitInitsReady(1, 20'000));
  }
  auto sb = Create("ahead", absl::StrCat(gateway(), ":", allowed.port()), /*userns=*/false);
  ASSERT_TRUE(sb);
  // With a pool, a made-ahead init was claimed: it joined the wired
  // namespace sent with its root.
  EXPECT_EQ(tier_->inits_taken(), GetParam() > 0 ? 1u : 0u);
  EXPECT_EQ(node_->wired_taken_ahead(), ahead_before + 1);
  EXPECT_EQ(node_->sandboxes(), 1u);
  CheckReachability(*sb, allowed, other);
  // The resolver is its nameserver.
  tier::ExecOutcome conf = Sh(*sb, "cat /etc/resolv.conf");
  EXPECT_EQ(conf.stdout_data, absl::StrCat("nameserver ", gateway(), "\n"));
  const std::string host_if = sb->network()->host_interface();
  ASSERT_TRUE(sb->Destroy().ok());
  sb.reset();
  EXPECT_FALSE(PathExists(absl::StrCat("/sys/class/net/", host_if))) << host_if;
  EXPECT_EQ(node_->sandboxes(), 0u);
  // What is left are the namespaces wired ahead (refilled), nothing else.
  ASSERT_TRUE(node_->WaitWiredReady(2, MonotonicNowNs() + 20'000'000'000));
  EXPECT_EQ(node_->leased(), 2u);
}

TEST_P(ContainerNetworkTest, WithoutANamespaceReadyTheCreateWiresOne) {
  // A node that wires no namespace ahead: every create wires its own (the
  // path a create takes when it outruns the refill; racing the refill made
  // this test depend on timing). Either path must give the same sandbox.
  MakeNodeAndTier(/*netns_ahead=*/0);
  if (HasFatalFailure() || IsSkipped()) return;
  std::vector<std::unique_ptr<tier::TierSandbox>> made;
  const uint64_t inline_before = node_->wired_made_inline();
  made.push_back(Create("n0", absl::StrCat(gateway(), ":1"), false));
  ASSERT_TRUE(made.back());
  ASSERT_EQ(node_->wired_made_inline(), inline_before + 1);
  EXPECT_EQ(node_->wired_taken_ahead(), 0u);
  std::unique_ptr<tier::TierSandbox>& c = made.back();
  Listener allowed(gateway()), other(gateway());
  ASSERT_GT(allowed.port(), 0);
  ASSERT_TRUE(c->network()->SetSpec(*network::ParseNetworkSpec(
                                         nlohmann::json{{"egress", {{"allow", {absl::StrCat(gateway(), ":",
                                                                                          allowed.port())}}}}}))
                  .ok());
  CheckReachability(*c, allowed, other);
  for (auto& sb : made) {
    ASSERT_TRUE(sb->Destroy().ok());
    sb.reset();
  }
  EXPECT_EQ(node_->sandboxes(), 0u);
}

TEST_P(ContainerNetworkTest, AUserNamespaceSandboxGetsItsNetworkAfterItsInit) {
  Listener allowed(gateway()), other(gateway());
  ASSERT_GT(allowed.port(), 0);
  const uint64_t taken = node_->wired_taken_ahead(), inline_made = node_->wired_made_inline();
  auto sb = Create("userns", absl::StrCat(gateway(), ":", allowed.port()), /*userns=*/true);
  ASSERT_TRUE(sb);
  // Its init makes its namespaces inside its user namespace: none wired
  // ahead is used.
  EXPECT_EQ(node_->wired_taken_ahead(), taken);
  EXPECT_EQ(node_->wired_made_inline(), inline_made);
  CheckReachability(*sb, allowed, other);
  ASSERT_TRUE(sb->Destroy().ok());
  EXPECT_EQ(node_->sandboxes(), 0u);
}

// 0: every init started at create; 1: made-ahead inits (the claim passes
// the wired namespace with the root).
INSTANTIATE_TEST_SUITE_P(InitPool, ContainerNetworkTest, ::testing::Values(0, 1));

}  // namespace
}  // namespace dsec::container
