// SPDX-License-Identifier: Apache-2.0
// A microVM's network (SandboxNetwork::CreateTap) in the real kernel, with
// no guest: a "guest" network namespace whose eth0 is a tap of its own, and
// a wire thread copying frames between that tap and the sandbox's tap
// descriptor, as the monitor's virtio-net does. So the guest side is a real
// TCP/IP stack (its connect() and the RST the tap filter sends back), and
// the host side is exactly what the microvm tier sets up. The outside world
// and the node network are sandbox_network_test's (test_network.h).
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/str_format.h"
#include "base/file_io.h"
#include "sandbox/network/sandbox_network.h"
#include "sandbox/network/test_network.h"

namespace dsec::network {
namespace {

using testing::FakeUpstream;
using testing::SandboxNetworkTest;
using testing::Server;

// The guest: eth0 (a tap) in a namespace of its own with the sandbox's
// address and a default route through the gateway, wired to the host's tap.
class WiredGuest {
 public:
  explicit WiredGuest(const SandboxNetwork& net) {
    std::thread([&] {
      if (unshare(CLONE_NEWNET) != 0) return;
      absl::StatusOr<ScopedFd> tap = MakeTap("eth0");
      if (!tap.ok()) return;
      guest_tap_ = std::move(*tap);
      netns_.Reset(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    }).join();
    EXPECT_TRUE(netns_.valid() && guest_tap_.valid());
    auto in = NlSocket::OpenIn(netns_.get());
    EXPECT_TRUE(in.ok()) << in.status();
    if (!in.ok()) return;
    EXPECT_TRUE(in->SetUp("lo").ok());
    EXPECT_TRUE(in->AddAddress("eth0", net.address_cidr()).ok());
    EXPECT_TRUE(in->SetUp("eth0").ok());
    EXPECT_TRUE(in->AddRoute("0.0.0.0/0", "eth0", net.gateway_text()).ok());
    host_tap_.Reset(fcntl(net.tap_fd(), F_DUPFD_CLOEXEC, 3));
    stop_.Reset(eventfd(0, EFD_CLOEXEC));
    EXPECT_TRUE(host_tap_.valid() && stop_.valid());
    wire_ = std::thread([this] { Wire(); });
  }
  ~WiredGuest() { Unplug(); }

  // Stops the wire and closes its copy of the host's tap (as a monitor
  // that exits).
  void Unplug() {
    if (wire_.joinable()) {
      uint64_t one = 1;
      (void)!write(stop_.get(), &one, sizeof(one));
      wire_.join();
    }
    host_tap_.Reset();
  }

  int netns() const { return netns_.get(); }

 private:
  // Frames keep their vnet header: both taps have the same (IFF_VNET_HDR,
  // no offloads set, so no checksum or segmentation is left to the reader).
  void Wire() {
    std::vector<char> buf(70000);
    for (;;) {
      pollfd p[3] = {{stop_.get(), POLLIN, 0}, {host_tap_.get(), POLLIN, 0}, {guest_tap_.get(), POLLIN, 0}};
      if (poll(p, 3, -1) < 0) return;
      if (p[0].revents) return;
      for (int i : {1, 2}) {
        if (!(p[i].revents & POLLIN)) {
          if (p[i].revents & (POLLERR | POLLHUP)) return;
          continue;
        }
        const ssize_t n = read(p[i].fd, buf.data(), buf.size());
        if (n <= 0) continue;
        (void)!write(i == 1 ? guest_tap_.get() : host_tap_.get(), buf.data(), static_cast<size_t>(n));
      }
    }
  }

  ScopedFd netns_, guest_tap_, host_tap_, stop_;
  std::thread wire_;
};

class SandboxTapTest : public SandboxNetworkTest {
 protected:
  std::unique_ptr<SandboxNetwork> NewTap(const std::string& spec_json) {
    auto spec = ParseNetworkSpec(nlohmann::json::parse(spec_json));
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (!spec.ok()) return nullptr;
    auto n = SandboxNetwork::CreateTap(node_.get(), *spec);
    EXPECT_TRUE(n.ok()) << n.status();
    return n.ok() ? std::move(*n) : nullptr;
  }
};

TEST_F(SandboxTapTest, TheHostEndIsATapWithTheGatewayAndTheGuestsMac) {
  std::unique_ptr<SandboxNetwork> net = NewTap("{}");
  ASSERT_TRUE(net);
  EXPECT_EQ(net->host_interface(), NodeNetwork::HostInterface(net->address()));
  EXPECT_GE(net->tap_fd(), 3);
  const int x = getpid() % 250;
  EXPECT_EQ(net->address_cidr(), absl::StrCat(net->address_text(), "/24"));
  EXPECT_EQ(net->GuestMac(), absl::StrFormat("02:00:0a:fb:%02x:%02x", x, net->address() & 0xff));
  // Up, with the gateway and forwarding on.
  auto flags = ReadSmallFile(absl::StrCat("/sys/class/net/", net->host_interface(), "/tun_flags"));
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(std::stoul(*flags, nullptr, 16) & 0x0002, 0x0002u) << *flags;  // IFF_TAP
  auto fwd = ReadSmallFile(absl::StrCat("/proc/sys/net/ipv4/conf/", net->host_interface(), "/forwarding"));
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  EXPECT_EQ(*fwd, "1\n");
}

TEST_F(SandboxTapTest, AnAllowedPeerIsReachedARefusedOneFailsAtOnce) {
  Server open(outside_ns_.get(), outside_), closed(outside_ns_.get(), outside_);
  ASSERT_GT(open.port(), 0);
  std::unique_ptr<SandboxNetwork> net =
      NewTap(absl::StrCat(R"({"egress": {"allow": [")", outside_, ":", open.port(), R"("]}})"));
  ASSERT_TRUE(net);
  WiredGuest guest(*net);
  const std::string host_side = absl::StrCat("198.18.", getpid() % 250, ".1");
  // Through the host's routing and NAT; the refused connect gets the tap
  // filter's RST (ECONNREFUSED, well within the probe's 2 s timeout); the
  // guest's loopback never reaches the tap.
  EXPECT_EQ(ProbeIn(guest.netns(), "", {Tcp(outside_, open.port()), Tcp(outside_, closed.port()), Tcp("127.0.0.1", 9)}),
            (std::vector<std::string>{"ok " + host_side, "ECONNREFUSED", "ECONNREFUSED"}));
  auto c = net->Counters();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->connects_allowed, 1u);
  EXPECT_EQ(c->connects_denied, 1u);
  EXPECT_GE(c->packets_dropped, 1u);
  EXPECT_GT(c->bytes_out, 0u);
  EXPECT_GT(c->bytes_in, 0u);
  // A change applies to the next connect.
  auto spec = ParseNetworkSpec(nlohmann::json::parse(absl::StrCat(R"({"egress": {"allow": [")", outside_, R"("]}})")));
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(net->SetSpec(*spec).ok());
  EXPECT_EQ(ProbeIn(guest.netns(), "", {Tcp(outside_, closed.port())}),
            (std::vector<std::string>{"ok " + host_side}));
}

TEST_F(SandboxTapTest, TheNodeResolverKnowsTheGuestByItsAddress) {
  node_.reset();
  FakeUpstream upstream(outside_, /*ttl=*/30);
  NodeNetworkOptions o;
  o.subnet = subnet_;
  o.uplinks = {uplink_};
  o.dns_upstream = absl::StrCat("127.0.0.1:", upstream.port());
  auto node = NodeNetwork::Create(o);
  ASSERT_TRUE(node.ok()) << node.status();
  node_ = std::move(*node);
  ASSERT_TRUE(node_->resolver_status().ok()) << node_->resolver_status();
  Server open(outside_ns_.get(), outside_);
  std::unique_ptr<SandboxNetwork> net =
      NewTap(absl::StrCat(R"({"egress": {"allow": ["pkg.example.test:)", open.port(), R"("]}})"));
  ASSERT_TRUE(net);
  WiredGuest guest(*net);
  const std::string gw = net->gateway_text();
  std::vector<std::string> r = ProbeIn(guest.netns(), "",
                                       {Tcp(outside_, open.port()), absl::StrCat("dns,other.invalid,", gw),
                                        absl::StrCat("dns,pkg.example.test,", gw), Tcp(outside_, open.port())});
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0], "ECONNREFUSED");  // not resolved yet
  EXPECT_EQ(r[1], "RCODE 5");
  EXPECT_EQ(r[2], "A " + outside_);
  EXPECT_EQ(r[3].substr(0, 2), "ok");
  EXPECT_EQ(net->resolved_count(), 1u);
}

TEST_F(SandboxTapTest, CloseRemovesTheTapEvenWhileAMonitorHoldsItAndReturnsTheLease) {
  std::unique_ptr<SandboxNetwork> net = NewTap("{}");
  ASSERT_TRUE(net);
  WiredGuest guest(*net);  // holds a copy of the descriptor, as a monitor
  const std::string host_if = net->host_interface();
  auto host = NlSocket::Open();
  ASSERT_TRUE(host.ok());
  EXPECT_TRUE(host->LinkIndex(host_if).ok());
  EXPECT_EQ(node_->leased(), 1u);
  net->Close();
  EXPECT_EQ(net->tap_fd(), -1);
  EXPECT_EQ(host->LinkIndex(host_if).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(node_->leased(), 0u);
  EXPECT_EQ(net->Counters().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SandboxTapTest, ATapGoesWithItsLastDescriptor) {
  // What makes a killed daemon's taps go: its descriptor closes with it,
  // the monitor's when the monitor dies (parent-death signal).
  const std::string name = absl::StrCat("dsnt", getpid() % 100000);
  auto host = NlSocket::Open();
  ASSERT_TRUE(host.ok());
  auto daemon_fd = MakeTap(name);
  ASSERT_TRUE(daemon_fd.ok()) << daemon_fd.status();
  ScopedFd monitor_fd(fcntl(daemon_fd->get(), F_DUPFD_CLOEXEC, 3));
  EXPECT_EQ(MakeTap(name).status().code(), absl::StatusCode::kAlreadyExists);
  daemon_fd->Reset();
  EXPECT_TRUE(host->LinkIndex(name).ok());
  monitor_fd.Reset();
  EXPECT_EQ(host->LinkIndex(name).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dsec::network
