// SPDX-License-Identifier: Apache-2.0
// Tests only: the fixture of sandbox networking's integration tests
// (sandbox_network_test.cc, sandbox_network_tap_test.cc). The test makes an
// "outside world" (a namespace behind a veth the node treats as its
// uplink, on a TEST-NET-style 198.18.x.0/24) and a node network on a
// subnet of its own; "sandboxes" are namespaces of the test's; a python3
// probe run inside one reports what its connects and queries got. No
// traffic leaves the machine.
#pragma once

#include "sandbox/network/sandbox_network.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
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
#include "base/scoped_fd.h"
#include "base/subprocess.h"
#include "gtest/gtest.h"
#include "sandbox/network/netlink.h"

namespace dsec::network::testing {

// One word per target ("tcp4,HOST,PORT", "udp4,..."): ok, timeout or the
// errno name; for tcp4 also what the peer said (its view of our address).
inline constexpr char kProbe[] = R"(
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

inline std::string Cgroup2Root() {
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

inline ScopedFd NewNetns() {
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

// A listener of the test process in its own namespace on `address`,
// e.g. a node network's gateway (IP_FREEBIND: that address exists only on
// sandboxes' host ends, which come and go), that accepts and closes on a
// thread of its own.
class HostListener {
 public:
  explicit HostListener(const std::string& address) {
    fd_.Reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    int one = 1;
    setsockopt(fd_.get(), SOL_IP, IP_FREEBIND, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, address.c_str(), &a.sin_addr);
    socklen_t len = sizeof(a);
    if (bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(fd_.get(), 256) != 0 ||
        getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_.get(), POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        ScopedFd c(accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      }
    });
  }
  ~HostListener() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return port_; }

 private:
  ScopedFd fd_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
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
    return ProbeIn(sb.netns.get(), sb.cgroup, targets);
  }
  // The probe in the namespace `netns`, in `cgroup` unless "".
  std::vector<std::string> ProbeIn(int netns, const std::string& cgroup, const std::vector<std::string>& targets) {
    SpawnOptions o;
    o.argv = {"/usr/bin/nsenter", absl::StrCat("--net=/proc/", getpid(), "/fd/", netns),
              "/usr/bin/python3", "-c", kProbe};
    o.argv.insert(o.argv.end(), targets.begin(), targets.end());
    o.out = Stdio::Capture();
    o.err = Stdio::Capture();
    if (!cgroup.empty()) o.join_cgroup_procs = {cgroup + "/cgroup.procs"};
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
      // An A query gets the address; any other type (AAAA from libc's
      // resolver) an empty answer.
      const bool a_query = q[i + 1] == 0 && q[i + 2] == 1;
      r[2] = static_cast<char>(0x81);  // QR, RD
      r[3] = static_cast<char>(0x80);  // RA, NOERROR
      r[6] = 0, r[7] = a_query ? 1 : 0;
      r[8] = r[9] = r[10] = r[11] = 0;
      if (a_query) {
        const uint8_t rr[] = {0xc0, 0x0c, 0, 1, 0, 1, static_cast<uint8_t>(ttl_ >> 24),
                              static_cast<uint8_t>(ttl_ >> 16), static_cast<uint8_t>(ttl_ >> 8),
                              static_cast<uint8_t>(ttl_), 0, 4};
        r.append(reinterpret_cast<const char*>(rr), sizeof(rr));
        r.append(reinterpret_cast<const char*>(&answer_), 4);
      }
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

}  // namespace dsec::network::testing
