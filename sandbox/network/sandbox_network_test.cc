// SPDX-License-Identifier: Apache-2.0
// Sandbox networking in the real kernel, with no traffic leaving the
// machine: the test makes a "sandbox" (a network namespace and a cgroup v2
// directory of its own) and an "outside world" (a second namespace behind
// a veth the node treats as its uplink, on a TEST-NET-style 198.18.x.0/24),
// and checks the address plumbing, NAT, the egress policy and its changes,
// isolation between sandboxes, counters and cleanup.
#include "sandbox/network/sandbox_network.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "base/clock.h"
#include "base/file_io.h"
#include "sandbox/network/test_network.h"

namespace dsec::network {
namespace {

using testing::NewNetns;
using testing::FakeUpstream;
using testing::Server;
using testing::SandboxNetworkTest;

TEST_F(SandboxNetworkTest, AnAllowedPeerIsReachedThroughNatAndNothingElse) {
  Server open(outside_ns_.get(), outside_), closed(outside_ns_.get(), outside_);
  ASSERT_GT(open.port(), 0);
  FakeSandbox& sb = NewSandbox(absl::StrCat(R"({"egress": {"allow": [")", outside_, ":", open.port(), R"("]}})"));
  ASSERT_TRUE(sb.network);
  const std::string host_side = absl::StrCat("198.18.", getpid() % 250, ".1");
  // The peer sees the node's address on the uplink, not the sandbox's.
  EXPECT_EQ(Probe(sb, {Tcp(outside_, open.port()), Tcp(outside_, closed.port())}),
            (std::vector<std::string>{"ok " + host_side, "EPERM"}));
  auto c = sb.network->Counters();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->connects_allowed, 1u);
  EXPECT_EQ(c->connects_denied, 1u);
  EXPECT_GT(c->bytes_out, 0u);
  EXPECT_GT(c->bytes_in, 0u);
}

TEST_F(SandboxNetworkTest, PolicyChangesApplyToTheNextConnect) {
  Server a(outside_ns_.get(), outside_), b(outside_ns_.get(), outside_);
  FakeSandbox& sb = NewSandbox(absl::StrCat(R"({"egress": {"allow": [")", outside_, ":", a.port(), R"("]}})"));
  ASSERT_TRUE(sb.network);
  EXPECT_EQ(Probe(sb, {Tcp(outside_, b.port())}), (std::vector<std::string>{"EPERM"}));
  auto spec = ParseNetworkSpec(nlohmann::json::parse(absl::StrCat(
      R"({"egress": {"allow": [")", outside_, R"(/32"], "deny": [")", outside_, ":", a.port(), R"("]}})")));
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(sb.network->SetSpec(*spec).ok());
  std::vector<std::string> r = Probe(sb, {Tcp(outside_, a.port()), Tcp(outside_, b.port())});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], "EPERM");
  EXPECT_EQ(r[1].substr(0, 2), "ok");
  EXPECT_EQ(sb.network->spec().egress.deny_text.size(), 1u);
}

TEST_F(SandboxNetworkTest, LoopbackWorksAndTheSandboxHasItsAddress) {
  FakeSandbox& sb = NewSandbox("{}");
  ASSERT_TRUE(sb.network);
  const std::string me = sb.network->address_text();
  EXPECT_EQ(me.rfind(absl::StrCat("10.251.", getpid() % 250, "."), 0), 0u) << me;
  EXPECT_EQ(sb.network->gateway_text(), absl::StrCat("10.251.", getpid() % 250, ".1"));
  EXPECT_EQ(sb.network->ResolvConf(), absl::StrCat("nameserver ", sb.network->gateway_text(), "\n"));
  // Nothing listens: loopback answers ECONNREFUSED, not EPERM; the
  // outside answers EPERM (nothing allowed).
  EXPECT_EQ(Probe(sb, {Tcp("127.0.0.1", 9), Tcp(outside_, 9)}),
            (std::vector<std::string>{"ECONNREFUSED", "EPERM"}));
}

TEST_F(SandboxNetworkTest, SandboxesNeverReachEachOtherWhateverTheirPolicies) {
  FakeSandbox& a = NewSandbox(absl::StrCat(R"({"egress": {"allow": [")", subnet_, R"("]}})"));
  FakeSandbox& b = NewSandbox("{}");
  ASSERT_TRUE(a.network && b.network);
  // b listens on its own address; a's policy allows the whole subnet, the
  // node's forward chain drops it.
  Server in_b(b.netns.get(), b.network->address_text());
  ASSERT_GT(in_b.port(), 0);
  EXPECT_EQ(Probe(a, {Tcp(b.network->address_text(), in_b.port())}),
            (std::vector<std::string>{"timeout"}));
}

TEST_F(SandboxNetworkTest, DestructionRemovesTheInterfaceTheProgramsAndTheLease) {
  FakeSandbox& sb = NewSandbox("{}");
  ASSERT_TRUE(sb.network);
  const std::string host_if = sb.network->host_interface();
  auto host = NlSocket::Open();
  ASSERT_TRUE(host.ok());
  EXPECT_TRUE(host->LinkIndex(host_if).ok());
  EXPECT_EQ(node_->leased(), 1u);
  sb.network.reset();
  EXPECT_EQ(host->LinkIndex(host_if).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(node_->leased(), 0u);
  // No eth0, no policy: the outside is unreachable, and not by EPERM.
  EXPECT_EQ(Probe(sb, {Tcp(outside_, 9)}), (std::vector<std::string>{"ENETUNREACH"}));
}

TEST_F(SandboxNetworkTest, OneSharedNetworkServesSeveralNamespacesWithOnePolicy) {
  Server a(outside_ns_.get(), outside_), b(outside_ns_.get(), outside_);
  auto shared = SandboxNetwork::CreateShared(
      node_.get(), Spec(absl::StrCat(R"({"egress": {"allow": [")", outside_, ":", a.port(), R"("]}})")));
  ASSERT_TRUE(shared.ok()) << shared.status();
  SandboxNetwork& net = **shared;
  EXPECT_TRUE(net.addresses().empty());
  EXPECT_EQ(net.address_text(), "");
  FakeSandbox& w1 = NewNamespace();
  FakeSandbox& w2 = NewNamespace();
  auto m1 = net.Join(w1.netns.get(), w1.cgroup);
  auto m2 = net.Join(w2.netns.get(), w2.cgroup);
  ASSERT_TRUE(m1.ok() && m2.ok()) << m1.status() << m2.status();
  EXPECT_NE((*m1)->address(), (*m2)->address());
  EXPECT_EQ(net.addresses().size(), 2u);
  EXPECT_EQ(node_->leased(), 2u);
  for (FakeSandbox* w : {&w1, &w2}) {
    EXPECT_EQ(Probe(*w, {Tcp(outside_, a.port()), Tcp(outside_, b.port())}),
              (std::vector<std::string>{"ok " + absl::StrCat("198.18.", getpid() % 250, ".1"), "EPERM"}));
  }
  // One change reaches both.
  ASSERT_TRUE(net.SetSpec(Spec(absl::StrCat(R"({"egress": {"allow": [")", outside_, ":", b.port(), R"("]}})"))).ok());
  for (FakeSandbox* w : {&w1, &w2}) {
    std::vector<std::string> r = Probe(*w, {Tcp(outside_, a.port()), Tcp(outside_, b.port())});
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0], "EPERM");
    EXPECT_EQ(r[1].substr(0, 2), "ok");
  }
  auto c = net.Counters();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->connects_allowed, 4u);
  EXPECT_EQ(c->connects_denied, 4u);
  const uint64_t bytes_out = c->bytes_out;
  EXPECT_GT(bytes_out, 0u);
  // A member that leaves takes its veth and lease; its bytes stay counted.
  const std::string gone_if = NodeNetwork::HostInterface((*m1)->address());
  auto host = NlSocket::Open();
  ASSERT_TRUE(host.ok());
  EXPECT_TRUE(host->LinkIndex(gone_if).ok());
  m1->reset();
  EXPECT_EQ(host->LinkIndex(gone_if).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(node_->leased(), 1u);
  EXPECT_EQ(net.addresses().size(), 1u);
  c = net.Counters();
  ASSERT_TRUE(c.ok());
  EXPECT_GE(c->bytes_out, bytes_out);
  // A member that joins now gets the current policy.
  FakeSandbox& w3 = NewNamespace();
  auto m3 = net.Join(w3.netns.get(), w3.cgroup);
  ASSERT_TRUE(m3.ok()) << m3.status();
  std::vector<std::string> r = Probe(w3, {Tcp(outside_, a.port()), Tcp(outside_, b.port())});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], "EPERM");
  EXPECT_EQ(r[1].substr(0, 2), "ok");
  // Close takes everything; the members' own destruction afterwards is a
  // no-op, and nobody joins any more.
  const std::string w3_if = net.host_interface();
  net.Close();
  EXPECT_EQ(node_->leased(), 0u);
  EXPECT_EQ(host->LinkIndex(w3_if).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(net.Join(w3.netns.get(), w3.cgroup).status().code(), absl::StatusCode::kFailedPrecondition);
  m2->reset();
  m3->reset();
  EXPECT_EQ(node_->leased(), 0u);
  EXPECT_EQ(Probe(w3, {Tcp(outside_, 9)}), (std::vector<std::string>{"ENETUNREACH"}));
}

TEST_F(SandboxNetworkTest, ADomainRuleAllowsExactlyWhatTheResolverAnsweredForItsTtl) {
  // The fixture's node network has no upstream of the test's: make one
  // that has (same subnet, so the fixture's goes first).
  node_.reset();
  FakeUpstream upstream(outside_, /*ttl=*/2);
  NodeNetworkOptions o;
  o.subnet = subnet_;
  o.uplinks = {uplink_};
  o.dns_upstream = absl::StrCat("127.0.0.1:", upstream.port());
  auto node = NodeNetwork::Create(o);
  ASSERT_TRUE(node.ok()) << node.status();
  node_ = std::move(*node);
  ASSERT_TRUE(node_->resolver_status().ok()) << node_->resolver_status();
  Server open(outside_ns_.get(), outside_), other(outside_ns_.get(), outside_);
  FakeSandbox& sb = NewSandbox(absl::StrCat(R"({"egress": {"allow": ["pkg.example.test:)", open.port(),
                                            R"(", "*.example.test"], "deny": ["bad.example.test"]}})"));
  ASSERT_TRUE(sb.network);
  const std::string gw = sb.network->gateway_text();
  // Before any answer the address is not allowed.
  EXPECT_EQ(Probe(sb, {Tcp(outside_, open.port())}), (std::vector<std::string>{"EPERM"}));
  std::vector<std::string> r =
      Probe(sb, {absl::StrCat("dns,pkg.example.test,", gw), absl::StrCat("dns,other.invalid,", gw),
                 absl::StrCat("dns,bad.example.test,", gw), Tcp(outside_, open.port()),
                 Tcp(outside_, other.port())});
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0], "A " + outside_);
  EXPECT_EQ(r[1], "RCODE 5");  // REFUSED: no rule names it
  EXPECT_EQ(r[2], "RCODE 5");  // REFUSED: the deny rule wins over the wildcard
  EXPECT_EQ(r[3].substr(0, 2), "ok");
  // The name matched the wildcard too, which allows every port.
  EXPECT_EQ(r[4].substr(0, 2), "ok");
  EXPECT_EQ(upstream.queries(), 1);  // refused names never went upstream
  EXPECT_GE(sb.network->resolved_count(), 1u);
  // After the TTL (2 s) the address goes: new connects are refused again.
  int64_t waited_ms = 0;
  std::vector<std::string> after;
  while (waited_ms < 10'000) {
    after = Probe(sb, {Tcp(outside_, open.port())});
    if (after == std::vector<std::string>{"EPERM"}) break;
    usleep(250'000);
    waited_ms += 250;
  }
  EXPECT_EQ(after, (std::vector<std::string>{"EPERM"})) << "still allowed after " << waited_ms << " ms";
  EXPECT_GE(waited_ms, 500);  // not before the TTL
  EXPECT_EQ(sb.network->resolved_count(), 0u);
}

TEST_F(SandboxNetworkTest, CreatesTakeMadeAheadPolicies) {
  ASSERT_TRUE(node_->WaitPoliciesReady(2, MonotonicNowNs() + 10'000'000'000));
  const uint64_t inline_before = node_->policies_loaded_inline();
  FakeSandbox& a = NewSandbox("{}");
  FakeSandbox& b = NewSandbox("{}");
  ASSERT_TRUE(a.network && b.network);
  EXPECT_EQ(node_->policies_taken_ahead(), 2u);
  EXPECT_EQ(node_->policies_loaded_inline(), inline_before);
  // A made-ahead policy starts empty like a new one: only what this
  // sandbox's policy allows.
  EXPECT_EQ(Probe(a, {Tcp(outside_, 9)}), (std::vector<std::string>{"EPERM"}));
}

TEST(NodeNetworkLeaseTest, LeasesRunOutWithAClearErrorAndComeBack) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (nftables)";
  NodeNetworkOptions o;
  o.subnet = absl::StrCat("10.251.", getpid() % 250, ".240/28");
  auto node = NodeNetwork::Create(o);
  if (node.status().code() == absl::StatusCode::kUnavailable) GTEST_SKIP() << node.status();
  ASSERT_TRUE(node.ok()) << node.status();
  std::set<uint32_t> got;
  for (int i = 0; i < 13; ++i) {  // .242 .. .254: not the network, gateway or broadcast
    auto a = (*node)->Lease();
    ASSERT_TRUE(a.ok()) << i << ": " << a.status();
    EXPECT_TRUE(got.insert(*a).second);
  }
  auto full = (*node)->Lease();
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(full.status().message()).find("no free address"), std::string::npos);
  (*node)->Release(*got.begin());
  EXPECT_EQ(*(*node)->Lease(), *got.begin());
}

TEST(NodeNetworkWiringTest, NamespacesWiredAheadAreTakenOnceAndGoWithTheNode) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (nftables, netlink)";
  NodeNetworkOptions o;
  o.subnet = absl::StrCat("10.250.", getpid() % 250, ".0/24");
  o.policies_ahead = 0;
  o.netns_ahead = 2;
  auto node = NodeNetwork::Create(o);
  if (node.status().code() == absl::StatusCode::kUnavailable) GTEST_SKIP() << node.status();
  ASSERT_TRUE(node.ok()) << node.status();
  ASSERT_TRUE((*node)->WaitWiredReady(2, MonotonicNowNs() + 20'000'000'000));
  EXPECT_EQ((*node)->leased(), 2u);
  EXPECT_EQ((*node)->sandboxes(), 0u);
  auto net = SandboxNetwork::CreateAhead(node->get(), NetworkSpec{});
  ASSERT_TRUE(net.ok()) << net.status();
  EXPECT_EQ((*node)->wired_taken_ahead(), 1u);
  EXPECT_GE((*net)->netns_fd(), 0);
  // Its eth0 is there, with the address, before anyone joins it.
  auto in = NlSocket::OpenIn((*net)->netns_fd());
  ASSERT_TRUE(in.ok());
  EXPECT_TRUE(in->LinkIndex("eth0").ok());
  const std::string host_if = (*net)->host_interface();
  EXPECT_TRUE(PathExists(absl::StrCat("/sys/class/net/", host_if)));
  // AttachTo once, to a real cgroup; not again, not for another kind.
  const std::string root = testing::Cgroup2Root();
  if (root.empty()) GTEST_SKIP() << "no cgroup v2 hierarchy";
  const std::string cg = absl::StrCat(root, "/dsec-net-ahead-", getpid());
  ASSERT_EQ(mkdir(cg.c_str(), 0755), 0) << strerror(errno);
  EXPECT_TRUE((*net)->AttachTo(cg).ok());
  EXPECT_EQ((*net)->netns_fd(), -1);
  EXPECT_EQ((*net)->AttachTo(cg).code(), absl::StatusCode::kFailedPrecondition);
  auto shared = SandboxNetwork::CreateShared(node->get(), NetworkSpec{});
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ((*shared)->AttachTo(cg).code(), absl::StatusCode::kFailedPrecondition);
  net->reset();
  EXPECT_FALSE(PathExists(absl::StrCat("/sys/class/net/", host_if)));
  rmdir(cg.c_str());
  // The pool refills; the node's end takes what it holds.
  ASSERT_TRUE((*node)->WaitWiredReady(2, MonotonicNowNs() + 20'000'000'000));
  std::vector<std::string> pooled;
  for (uint32_t a = (*node)->gateway() + 1; a < (*node)->gateway() + 254; ++a) {
    if (PathExists(absl::StrCat("/sys/class/net/", NodeNetwork::HostInterface(a)))) {
      pooled.push_back(NodeNetwork::HostInterface(a));
    }
  }
  EXPECT_EQ(pooled.size(), 2u);
  node->reset();
  for (const std::string& p : pooled) EXPECT_FALSE(PathExists(absl::StrCat("/sys/class/net/", p))) << p;
}

bool NftTableExists(const std::string& name) {
  SpawnOptions o;
  o.argv = {"nft", "list", "table", "ip", name};
  auto r = RunSubprocess(o);
  return r.ok() && r->Succeeded();
}

std::string Forwarding(const std::string& ifname) {
  std::ifstream in("/proc/sys/net/ipv4/conf/" + ifname + "/forwarding");
  std::string v;
  in >> v;
  return v;
}

TEST(NodeNetworkRestartTest, ADeadOwnersTableAndForwardingAreUndone) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (nftables, netlink)";
  const int x = getpid() % 250;
  const std::string subnet = absl::StrCat("10.250.", x, ".0/24");
  const std::string uplink = absl::StrCat("dsr", getpid() % 100000);
  ScopedFd ns = NewNetns();
  ASSERT_TRUE(ns.valid());
  auto host = NlSocket::Open();
  ASSERT_TRUE(host.ok());
  (void)host->DeleteLink(uplink);
  ASSERT_TRUE(host->AddVeth(uplink, "eth0", ns.get()).ok());
  ASSERT_EQ(Forwarding(uplink), "0");
  // The owner: a child that makes the node network and dies as kill -9
  // would leave it (no destructors).
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    NodeNetworkOptions o;
    o.subnet = subnet;
    o.uplinks = {uplink};
    auto n = NodeNetwork::Create(o);
    _exit(n.ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char table[64];
  snprintf(table, sizeof(table), "dsec_vmm_%08x_24", (10u << 24) | (250u << 16) | (static_cast<unsigned>(x) << 8));
  EXPECT_TRUE(NftTableExists(table));
  EXPECT_EQ(Forwarding(uplink), "1");
  auto cleaned = CleanupStaleNodeNetwork(subnet);
  ASSERT_TRUE(cleaned.ok()) << cleaned.status();
  EXPECT_TRUE(*cleaned);
  EXPECT_FALSE(NftTableExists(table));
  EXPECT_EQ(Forwarding(uplink), "0");
  EXPECT_FALSE(*CleanupStaleNodeNetwork(subnet));  // nothing left the second time
  // A live owner is never cleaned up under it.
  NodeNetworkOptions o;
  o.subnet = subnet;
  auto live = NodeNetwork::Create(o);
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_FALSE(*CleanupStaleNodeNetwork(subnet));
  EXPECT_TRUE(NftTableExists(table));
  // And a second owner of the same subnet is refused, naming it.
  auto second = NodeNetwork::Create(o);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(second.status().message()).find("in use"), std::string::npos);
  live->reset();
  EXPECT_FALSE(NftTableExists(table));
  (void)host->DeleteLink(uplink);
}

TEST(NodeNetworkOptionsTest, BadOptionsAreClearErrors) {
  for (const char* bad : {"10.0.0.0", "10.0.0.1/24", "10.0.0.0/30", "300.0.0.0/8", "10.0.0.0/x"}) {
    NodeNetworkOptions o;
    o.subnet = bad;
    auto n = NodeNetwork::Create(o);
    EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  NodeNetworkOptions o;
  o.subnet = absl::StrCat("10.251.", getpid() % 250, ".0/24");
  o.uplinks = {"no-such-if0"};
  if (geteuid() == 0) {
    auto n = NodeNetwork::Create(o);
    EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(n.status().message()).find("no-such-if0"), std::string::npos);
  }
}

}  // namespace
}  // namespace dsec::network
