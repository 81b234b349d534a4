// SPDX-License-Identifier: Apache-2.0
// Sandbox networking in the real kernel, with no traffic leaving the
// machine: the test makes a "sandbox" (a network namespace and a cgroup v2
// directory of its own) and an "outside world" (a second namespace behind
// a veth the node treats as its uplink, on a TEST-NET-style 198.18.x.0/24),
// and checks the address plumbing, NAT, the egress policy and its changes,
// isolation between sandboxes, counters and cleanup.
#include "sandbox/network/sandbox_network.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/clock.h"
#include "base/scoped_fd.h"
#include "base/subprocess.h"
#include "gtest/gtest.h"
#include "sandbox/network/netlink.h"

namespace dsec::network {
namespace {

// One word per target ("tcp4,HOST,PORT", "udp4,..."): ok, timeout or the
// errno name; for tcp4 also what the peer said (its view of our address).
constexpr char kProbe[] = R"(
import errno, socket, struct, sys

def dns(name, server):
    q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(q, (server, 53))
    d = s.recv(4096)
    if d[3] & 0xf:
        return "RCODE %d" % (d[3] & 0xf)
    i = 12
    while d[i]:
        i += d[i] + 1
    i += 5
    for _ in range(struct.unpack(">H", d[6:8])[0]):
        i += 2 if d[i] & 0xc0 else len(d[i:].split(b"\0", 1)[0]) + 1
        typ, _, ttl, n = struct.unpack(">HHIH", d[i:i + 10])
        i += 10
        if typ == 1:
            return "A " + socket.inet_ntoa(d[i:i + 4])
        i += n
    return "none"

for t in sys.argv[1:]:
    kind, host, port = t.split(",")
    if kind == "dns":
        try:
            print(dns(host, port))
        except socket.timeout:
            print("timeout")
        continue
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM if kind == "udp4" else socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        if kind == "udp4":
            s.sendto(b"x", (host, int(port)))
            print("ok")
        else:
            s.connect((host, int(port)))
            print("ok " + s.recv(64).decode())
    except socket.timeout:
        print("timeout")
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e.errno)))
    finally:
        s.close()
)";

std::string Cgroup2Root() {
  std::ifstream mounts("/proc/self/mounts");
  std::string line;
  while (std::getline(mounts, line)) {
    std::istringstream in(line);
    std::string dev, dir, type;
    in >> dev >> dir >> type;
    if (type == "cgroup2") return dir;
  }
  return "";
}

ScopedFd NewNetns() {
  ScopedFd out;
  std::thread([&] {
    if (unshare(CLONE_NEWNET) == 0) out.Reset(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  }).join();
  return out;
}

// A listening TCP socket made inside `netns` on addr:0; answers each
// connection with the peer address it sees (on a thread of its own).
class Server {
 public:
  Server(int netns, const std::string& addr) {
    std::thread([&] {
      if (setns(netns, CLONE_NEWNET) != 0) return;
      fd_.Reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      sockaddr_in a{};
      a.sin_family = AF_INET;
      inet_pton(AF_INET, addr.c_str(), &a.sin_addr);
      socklen_t len = sizeof(a);
      if (bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(fd_.get(), 16) != 0 ||
          getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        fd_.Reset();
        return;
      }
      port_ = ntohs(a.sin_port);
    }).join();
    if (fd_.valid()) thread_ = std::thread([this] { Serve(); });
  }
  ~Server() {
    if (fd_.valid()) shutdown(fd_.get(), SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return port_; }

 private:
  void Serve() {
    for (;;) {
      sockaddr_in peer{};
      socklen_t len = sizeof(peer);
      ScopedFd c(accept4(fd_.get(), reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC));
      if (!c.valid()) return;
      char text[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &peer.sin_addr, text, sizeof(text));
      (void)!write(c.get(), text, strlen(text));
    }
  }
  ScopedFd fd_;
  int port_ = 0;
  std::thread thread_;
};

class SandboxNetworkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (netlink, nftables, BPF, cgroups)";
    const std::string root = Cgroup2Root();
    if (root.empty()) GTEST_SKIP() << "no cgroup v2 hierarchy mounted";
    if (access("/usr/bin/nsenter", X_OK) != 0) GTEST_SKIP() << "no nsenter";
    const int x = getpid() % 250;
    subnet_ = absl::StrCat("10.251.", x, ".0/24");
    outside_ = absl::StrCat("198.18.", x, ".2");
    uplink_ = absl::StrCat("dsu", getpid() % 100000);
    // The outside world.
    outside_ns_ = NewNetns();
    ASSERT_TRUE(outside_ns_.valid()) << strerror(errno);
    auto host = NlSocket::Open();
    ASSERT_TRUE(host.ok()) << host.status();
    (void)host->DeleteLink(uplink_);  // a crashed run's
    ASSERT_TRUE(host->AddVeth(uplink_, "eth0", outside_ns_.get()).ok());
    uplink_made_ = true;
    ASSERT_TRUE(host->AddAddress(uplink_, absl::StrCat("198.18.", x, ".1/24")).ok());
    ASSERT_TRUE(host->SetUp(uplink_).ok());
    auto out = NlSocket::OpenIn(outside_ns_.get());
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_TRUE(out->AddAddress("eth0", outside_ + "/24").ok());
    ASSERT_TRUE(out->SetUp("eth0").ok());
    ASSERT_TRUE(out->SetUp("lo").ok());
    NodeNetworkOptions o;
    o.subnet = subnet_;
    o.uplinks = {uplink_};
    auto node = NodeNetwork::Create(o);
    if (node.status().code() == absl::StatusCode::kUnavailable) GTEST_SKIP() << node.status();
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = std::move(*node);
    cgroup_root_ = root;
  }

  void TearDown() override {
    sandboxes_.clear();
    node_.reset();
    for (const std::string& d : cgroups_) rmdir(d.c_str());
    if (uplink_made_) {
      auto host = NlSocket::Open();
      if (host.ok()) (void)host->DeleteLink(uplink_);
    }
  }

  struct FakeSandbox {
    ScopedFd netns;
    std::string cgroup;
    std::unique_ptr<SandboxNetwork> network;
  };

  // A namespace with lo up and a cgroup v2 directory: what a tier hands in.
  FakeSandbox& NewSandbox(const std::string& spec_json) {
    FakeSandbox& sb = NewNamespace();
    auto spec = ParseNetworkSpec(nlohmann::json::parse(spec_json));
    EXPECT_TRUE(spec.ok()) << spec.status();
    auto n = SandboxNetwork::Create(node_.get(), sb.netns.get(), sb.cgroup, *spec);
    EXPECT_TRUE(n.ok()) << n.status();
    if (n.ok()) sb.network = std::move(*n);
    return sb;
  }

  // The same without a network (a fncall worker's namespace).
  FakeSandbox& NewNamespace() {
    auto sb = std::make_unique<FakeSandbox>();
    sb->netns = NewNetns();
    EXPECT_TRUE(sb->netns.valid());
    auto in = NlSocket::OpenIn(sb->netns.get());
    EXPECT_TRUE(in.ok() && in->SetUp("lo").ok());
    sb->cgroup = absl::StrCat(cgroup_root_, "/dsec-net-test-", getpid(), "-", sandboxes_.size());
    EXPECT_EQ(mkdir(sb->cgroup.c_str(), 0755), 0) << strerror(errno);
    cgroups_.push_back(sb->cgroup);
    sandboxes_.push_back(std::move(sb));
    return *sandboxes_.back();
  }

  NetworkSpec Spec(const std::string& spec_json) {
    auto spec = ParseNetworkSpec(nlohmann::json::parse(spec_json));
    EXPECT_TRUE(spec.ok()) << spec.status();
    return spec.ok() ? *spec : NetworkSpec{};
  }

  std::vector<std::string> Probe(const FakeSandbox& sb, const std::vector<std::string>& targets) {
    SpawnOptions o;
    o.argv = {"/usr/bin/nsenter", absl::StrCat("--net=/proc/", getpid(), "/fd/", sb.netns.get()),
              "/usr/bin/python3", "-c", kProbe};
    o.argv.insert(o.argv.end(), targets.begin(), targets.end());
    o.out = Stdio::Capture();
    o.err = Stdio::Capture();
    o.join_cgroup_procs = {sb.cgroup + "/cgroup.procs"};
    o.timeout_ms = 30'000;
    auto r = RunSubprocess(o);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    EXPECT_EQ(r->exit_code, 0) << r->err;
    return absl::StrSplit(absl::StripTrailingAsciiWhitespace(r->out), '\n');
  }

  std::string Tcp(const std::string& host, int port) { return absl::StrCat("tcp4,", host, ",", port); }

  std::string subnet_, outside_, uplink_, cgroup_root_;
  bool uplink_made_ = false;
  ScopedFd outside_ns_;
  std::unique_ptr<NodeNetwork> node_;
  std::vector<std::unique_ptr<FakeSandbox>> sandboxes_;
  std::vector<std::string> cgroups_;
};

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

// A DNS server on loopback answering every A query with one address and
// TTL (the node resolver's upstream in the test), on a thread of its own.
class FakeUpstream {
 public:
  FakeUpstream(const std::string& answer, uint32_t ttl) : ttl_(ttl) {
    inet_pton(AF_INET, answer.c_str(), &answer_);
    fd_.Reset(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), len);
    getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeUpstream() {
    shutdown(fd_.get(), SHUT_RDWR);
    thread_.join();
  }
  int port() const { return port_; }
  int queries() const { return queries_.load(); }

 private:
  void Serve() {
    for (;;) {
      uint8_t q[512];
      sockaddr_in from{};
      socklen_t len = sizeof(from);
      const ssize_t n = recvfrom(fd_.get(), q, sizeof(q), 0, reinterpret_cast<sockaddr*>(&from), &len);
      if (n <= 12) return;
      queries_++;
      // The question ends after its name and 4 bytes of type and class.
      size_t i = 12;
      while (i < static_cast<size_t>(n) && q[i] != 0) i += q[i] + 1;
      const size_t qend = i + 5;
      if (qend > static_cast<size_t>(n)) continue;
      std::string r(reinterpret_cast<char*>(q), qend);
      r[2] = static_cast<char>(0x81);  // QR, RD
      r[3] = static_cast<char>(0x80);  // RA, NOERROR
      r[6] = 0, r[7] = 1;              // one answer
      r[8] = r[9] = r[10] = r[11] = 0;
      const uint8_t rr[] = {0xc0, 0x0c, 0, 1, 0, 1, static_cast<uint8_t>(ttl_ >> 24), static_cast<uint8_t>(ttl_ >> 16),
                            static_cast<uint8_t>(ttl_ >> 8), static_cast<uint8_t>(ttl_), 0, 4};
      r.append(reinterpret_cast<const char*>(rr), sizeof(rr));
      r.append(reinterpret_cast<const char*>(&answer_), 4);
      sendto(fd_.get(), r.data(), r.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
    }
  }
  in_addr answer_{};
  uint32_t ttl_;
  ScopedFd fd_;
  int port_ = 0;
  std::atomic<int> queries_{0};
  std::thread thread_;
};

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
