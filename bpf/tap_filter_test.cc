// SPDX-License-Identifier: Apache-2.0
// The tap's tc program in the real kernel: a network namespace of the
// test's own (unshared by the test thread, gone with its last fd), a tap in
// it with 10.99.0.1/24 and fd00:99::1/64, UDP sockets bound there, and
// hand-built frames written into the tap fd as the guest would send them
// (they arrive as the tap's ingress). Verdicts are seen in the sockets and
// the counters; every check ends with an ARP exchange (ARP always passes)
// whose reply, read back from the tap, shows the frames before it were
// processed. Nothing leaves the namespace.
#include "bpf/tap_filter.h"

#include <arpa/inet.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/if_addr.h>
#include <linux/if_tun.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/scoped_fd.h"
#include "gtest/gtest.h"

namespace dsec::bpf {
namespace {

using Bytes = std::vector<uint8_t>;
using Mac = std::array<uint8_t, 6>;

constexpr char kTapName[] = "dsectap0";
constexpr Mac kGuestMac = {0x02, 0, 0, 0, 0, 0x02};
constexpr uint16_t kEthIp = 0x0800, kEthArp = 0x0806, kEthIpv6 = 0x86dd;
constexpr size_t kArpFrameLen = 14 + 28;

in_addr V4(const char* text) {
  in_addr a{};
  inet_pton(AF_INET, text, &a);
  return a;
}
in6_addr V6(const char* text) {
  in6_addr a{};
  inet_pton(AF_INET6, text, &a);
  return a;
}

void Put16(Bytes* b, uint16_t v) {
  b->push_back(static_cast<uint8_t>(v >> 8));
  b->push_back(static_cast<uint8_t>(v));
}
void PutBytes(Bytes* b, const void* p, size_t n) {
  const auto* u = static_cast<const uint8_t*>(p);
  b->insert(b->end(), u, u + n);
}

// The Internet checksum (RFC 1071), continuing from `sum`.
uint16_t Checksum(const Bytes& b, uint32_t sum = 0) {
  for (size_t i = 0; i < b.size(); i += 2) sum += (b[i] << 8) | (i + 1 < b.size() ? b[i + 1] : 0);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

Bytes Ethernet(const Mac& dst, uint16_t type, const Bytes& payload) {
  Bytes f(dst.begin(), dst.end());
  f.insert(f.end(), kGuestMac.begin(), kGuestMac.end());
  Put16(&f, type);
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

Bytes Ipv4(uint8_t proto, const char* src, const char* dst, const Bytes& payload) {
  Bytes h = {0x45, 0};
  Put16(&h, static_cast<uint16_t>(20 + payload.size()));
  Put16(&h, 1);       // id
  Put16(&h, 0x4000);  // don't fragment
  h.push_back(64);
  h.push_back(proto);
  Put16(&h, 0);
  const in_addr s = V4(src), d = V4(dst);
  PutBytes(&h, &s, 4);
  PutBytes(&h, &d, 4);
  const uint16_t sum = Checksum(h);
  h[10] = static_cast<uint8_t>(sum >> 8);
  h[11] = static_cast<uint8_t>(sum);
  h.insert(h.end(), payload.begin(), payload.end());
  return h;
}

// UDP over IPv4 with no checksum (allowed for IPv4, RFC 768).
Bytes Udp4(const char* dst, uint16_t port, const std::string& data, const char* src = "10.99.0.2") {
  Bytes u;
  Put16(&u, 40000);
  Put16(&u, port);
  Put16(&u, static_cast<uint16_t>(8 + data.size()));
  Put16(&u, 0);
  PutBytes(&u, data.data(), data.size());
  return Ipv4(IPPROTO_UDP, src, dst, u);
}

// The TCP checksum of `segment` between two IPv4 addresses (RFC 9293 3.1).
uint16_t TcpChecksum(in_addr src, in_addr dst, const Bytes& segment) {
  Bytes pseudo;
  PutBytes(&pseudo, &src, 4);
  PutBytes(&pseudo, &dst, 4);
  Put16(&pseudo, IPPROTO_TCP);
  Put16(&pseudo, static_cast<uint16_t>(segment.size()));
  pseudo.insert(pseudo.end(), segment.begin(), segment.end());
  return Checksum(pseudo);
}

constexpr uint32_t kSynSeq = 0x11223344;

// A SYN from 10.99.0.2:40001 with an MSS option, as a connect() sends it.
Bytes Syn4(const char* dst, uint16_t port) {
  Bytes t;
  Put16(&t, 40001);
  Put16(&t, port);
  for (int shift = 24; shift >= 0; shift -= 8) t.push_back(static_cast<uint8_t>(kSynSeq >> shift));
  t.insert(t.end(), 4, 0);  // ack
  t.push_back(6 << 4);      // data offset: 24 bytes
  t.push_back(0x02);        // SYN
  Put16(&t, 64240);         // window
  Put16(&t, 0);             // checksum
  Put16(&t, 0);             // urgent
  t.insert(t.end(), {2, 4, 0x05, 0xb4});  // MSS 1460
  const uint16_t sum = TcpChecksum(V4("10.99.0.2"), V4(dst), t);
  t[16] = static_cast<uint8_t>(sum >> 8);
  t[17] = static_cast<uint8_t>(sum);
  return Ipv4(IPPROTO_TCP, "10.99.0.2", dst, t);
}

Bytes IcmpEcho(const char* dst) {
  Bytes e = {8, 0, 0, 0, 0x12, 0x34, 0, 1, 'p', 'i', 'n', 'g'};
  const uint16_t sum = Checksum(e);
  e[2] = static_cast<uint8_t>(sum >> 8);
  e[3] = static_cast<uint8_t>(sum);
  return Ipv4(IPPROTO_ICMP, "10.99.0.2", dst, e);
}

// UDP over IPv6 from fd00:99::2; the checksum is mandatory (RFC 8200 8.1).
Bytes Udp6(const char* dst, uint16_t port, const std::string& data) {
  const in6_addr s = V6("fd00:99::2"), d = V6(dst);
  const uint16_t len = static_cast<uint16_t>(8 + data.size());
  Bytes u;
  Put16(&u, 40000);
  Put16(&u, port);
  Put16(&u, len);
  Put16(&u, 0);
  PutBytes(&u, data.data(), data.size());
  Bytes pseudo;
  PutBytes(&pseudo, &s, 16);
  PutBytes(&pseudo, &d, 16);
  Put16(&pseudo, 0);
  Put16(&pseudo, len);
  Put16(&pseudo, 0);
  Put16(&pseudo, IPPROTO_UDP);
  pseudo.insert(pseudo.end(), u.begin(), u.end());
  const uint16_t sum = Checksum(pseudo);
  u[6] = static_cast<uint8_t>(sum >> 8);
  u[7] = static_cast<uint8_t>(sum);
  Bytes h = {0x60, 0, 0, 0};
  Put16(&h, len);
  h.push_back(IPPROTO_UDP);
  h.push_back(64);
  PutBytes(&h, &s, 16);
  PutBytes(&h, &d, 16);
  h.insert(h.end(), u.begin(), u.end());
  return h;
}

// "Who has 10.99.0.1? Tell 10.99.0.2", broadcast.
Bytes ArpRequest() {
  Bytes a;
  Put16(&a, 1);  // Ethernet
  Put16(&a, kEthIp);
  a.push_back(6);
  a.push_back(4);
  Put16(&a, 1);  // request
  a.insert(a.end(), kGuestMac.begin(), kGuestMac.end());
  const in_addr s = V4("10.99.0.2"), t = V4("10.99.0.1");
  PutBytes(&a, &s, 4);
  a.insert(a.end(), 6, 0);
  PutBytes(&a, &t, 4);
  return Ethernet(Mac{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, kEthArp, a);
}

EgressRule Rule(const std::string& text) {
  auto r = ParseEgressRule(text);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : EgressRule{};
}

class TapFilterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (BPF, network namespaces, tap devices)";
    home_netns_.Reset(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(home_netns_.valid()) << strerror(errno);
    // This thread only: the namespace goes when the test's fds in it close.
    ASSERT_EQ(unshare(CLONE_NEWNET), 0) << strerror(errno);
    test_netns_.Reset(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    tap_.Reset(open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK));
    if (!tap_.valid()) GTEST_SKIP() << "no /dev/net/tun: " << strerror(errno);
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, kTapName, IFNAMSIZ - 1);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    ASSERT_EQ(ioctl(tap_.get(), TUNSETIFF, &ifr), 0) << strerror(errno);
    ctl_.Reset(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ASSERT_EQ(ioctl(ctl_.get(), SIOCGIFINDEX, &ifr), 0) << strerror(errno);
    ifindex_ = ifr.ifr_ifindex;
    ASSERT_EQ(ioctl(ctl_.get(), SIOCGIFHWADDR, &ifr), 0) << strerror(errno);
    std::memcpy(tap_mac_.data(), ifr.ifr_hwaddr.sa_data, 6);
    ConfigureTap();
    udp_a_ = Bind(AF_INET, "10.99.0.1", &port_a_);
    udp_b_ = Bind(AF_INET, "10.99.0.1", &port_b_);
    udp6_ = Bind(AF_INET6, "fd00:99::1", &port6_);

    auto filter = TapFilter::Load();
    if (!filter.ok()) GTEST_SKIP() << filter.status();
    filter_ = std::move(*filter);
    if (absl::Status s = filter_->AttachToInterface(ifindex_); !s.ok()) GTEST_SKIP() << s;
    // ARP passes with no rules; the exchange also gives the kernel the
    // guest's address for replies (its neighbour entry).
    ASSERT_TRUE(Sync().has_value());
    auto c = filter_->Counters();
    ASSERT_TRUE(c.ok()) << c.status();
    base_ = *c;
  }

  void TearDown() override {
    filter_.reset();
    udp_a_.Reset();
    udp_b_.Reset();
    udp6_.Reset();
    ctl_.Reset();
    tap_.Reset();
    test_netns_.Reset();
    if (home_netns_.valid()) {
      EXPECT_EQ(setns(home_netns_.get(), CLONE_NEWNET), 0) << strerror(errno);
    }
  }

  void ConfigureTap() {
    // No duplicate address detection: the IPv6 address is usable at once.
    if (ScopedFd dad(open(absl::StrCat("/proc/sys/net/ipv6/conf/", kTapName, "/accept_dad").c_str(),
                          O_WRONLY | O_CLOEXEC));
        dad.valid()) {
      EXPECT_EQ(write(dad.get(), "0", 1), 1);
    }
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, kTapName, IFNAMSIZ - 1);
    auto* sin = reinterpret_cast<sockaddr_in*>(&ifr.ifr_addr);
    sin->sin_family = AF_INET;
    sin->sin_addr = V4("10.99.0.1");
    ASSERT_EQ(ioctl(ctl_.get(), SIOCSIFADDR, &ifr), 0) << strerror(errno);
    sin->sin_addr = V4("255.255.255.0");
    ASSERT_EQ(ioctl(ctl_.get(), SIOCSIFNETMASK, &ifr), 0) << strerror(errno);
    ASSERT_EQ(ioctl(ctl_.get(), SIOCGIFFLAGS, &ifr), 0) << strerror(errno);
    ifr.ifr_flags |= IFF_UP;
    ASSERT_EQ(ioctl(ctl_.get(), SIOCSIFFLAGS, &ifr), 0) << strerror(errno);
    // The address is tentative, so neither bindable nor routed to, until
    // the kernel's DAD work has run (at once, with DAD off): wait for the
    // notification that says so.
    ScopedFd nl(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
    sockaddr_nl groups = {};
    groups.nl_family = AF_NETLINK;
    groups.nl_groups = RTMGRP_IPV6_IFADDR;
    ASSERT_EQ(bind(nl.get(), reinterpret_cast<sockaddr*>(&groups), sizeof(groups)), 0) << strerror(errno);
    ScopedFd ctl6(socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    // The kernel's struct in6_ifreq (linux/ipv6.h, which glibc's headers
    // clash with).
    struct {
      in6_addr addr;
      uint32_t prefixlen;
      int ifindex;
    } ifr6 = {V6("fd00:99::1"), 64, ifindex_};
    ASSERT_EQ(ioctl(ctl6.get(), SIOCSIFADDR, &ifr6), 0) << strerror(errno);
    ASSERT_TRUE(WaitUntilUsable(nl.get(), ifr6.addr)) << "fd00:99::1 stayed tentative";
  }

  // Reads address notifications until `addr` on the tap is no longer
  // tentative.
  bool WaitUntilUsable(int nl, const in6_addr& addr) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p = {nl, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      alignas(nlmsghdr) char buf[8192];
      const ssize_t n = recv(nl, buf, sizeof(buf), 0);
      if (n <= 0) continue;
      int len = static_cast<int>(n);
      for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
        if (h->nlmsg_type != RTM_NEWADDR) continue;
        const auto* ifa = static_cast<const ifaddrmsg*>(NLMSG_DATA(h));
        if (ifa->ifa_family != AF_INET6 || static_cast<int>(ifa->ifa_index) != ifindex_ ||
            (ifa->ifa_flags & IFA_F_TENTATIVE)) {
          continue;
        }
        int alen = static_cast<int>(IFA_PAYLOAD(h));
        for (auto* a = IFA_RTA(ifa); RTA_OK(a, alen); a = RTA_NEXT(a, alen)) {
          if (a->rta_type == IFA_ADDRESS && RTA_PAYLOAD(a) == 16 &&
              std::memcmp(RTA_DATA(a), &addr, 16) == 0) {
            return true;
          }
        }
      }
    }
  }

  static ScopedFd Bind(int family, const char* addr, uint16_t* port) {
    ScopedFd fd(socket(family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    sockaddr_storage ss{};
    socklen_t len;
    if (family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_addr = V4(addr);
      len = sizeof(*a);
    } else {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_addr = V6(addr);
      len = sizeof(*a);
    }
    EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len), 0) << addr << ": " << strerror(errno);
    EXPECT_EQ(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len), 0);
    *port = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                    : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    return fd;
  }

  // Writes one frame into the tap, as the guest would send it; returns its
  // length.
  size_t Send(const Bytes& frame) {
    EXPECT_EQ(write(tap_.get(), frame.data(), frame.size()), static_cast<ssize_t>(frame.size()))
        << strerror(errno);
    return frame.size();
  }
  size_t SendIp(const Bytes& packet) { return Send(Ethernet(tap_mac_, kEthIp, packet)); }
  size_t SendIp6(const Bytes& packet) { return Send(Ethernet(tap_mac_, kEthIpv6, packet)); }

  // Sends an ARP request and reads the tap until its reply: the frames
  // written before it have been through the filter (and the stack) by then.
  // Returns the frames the host sent before the reply, nullopt on timeout.
  std::optional<std::vector<Bytes>> Sync() {
    Send(ArpRequest());
    std::vector<Bytes> before;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p = {tap_.get(), POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      Bytes f(2048);
      const ssize_t n = read(tap_.get(), f.data(), f.size());
      if (n <= 0) continue;
      f.resize(static_cast<size_t>(n));
      // An ARP reply (opcode 2) from 10.99.0.1.
      if (n >= 42 && f[12] == 0x08 && f[13] == 0x06 && f[20] == 0 && f[21] == 2 && f[28] == 10 &&
          f[29] == 99 && f[30] == 0 && f[31] == 1) {
        return before;
      }
      before.push_back(std::move(f));
    }
  }

  // The TCP segments among `frames` (IPv4, no options) whose flags byte is
  // `flags`.
  static std::vector<Bytes> TcpWithFlags(const std::vector<Bytes>& frames, uint8_t flags) {
    std::vector<Bytes> out;
    for (const Bytes& f : frames) {
      if (f.size() >= 54 && f[12] == 0x08 && f[13] == 0x00 && f[14] == 0x45 && f[23] == IPPROTO_TCP &&
          f[14 + 20 + 13] == flags) {
        out.push_back(f);
      }
    }
    return out;
  }

  static bool HasEchoReply(const std::vector<Bytes>& frames) {
    for (const Bytes& f : frames) {
      if (f.size() >= 34 && f[12] == 0x08 && f[13] == 0x00 && f[23] == IPPROTO_ICMP &&
          f[14 + (f[14] & 0xf) * 4] == 0) {
        return true;
      }
    }
    return false;
  }

  // The next datagram queued on `fd`, or "" when there is none.
  static std::string Received(const ScopedFd& fd) {
    char buf[256];
    const ssize_t n = recv(fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }

  // Counters since SetUp (whose ARP exchange they leave out).
  TapCounters Delta() {
    auto c = filter_->Counters();
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return {};
    return TapCounters{c->packets_allowed - base_.packets_allowed, c->bytes_allowed - base_.bytes_allowed,
                       c->packets_dropped - base_.packets_dropped, c->bytes_dropped - base_.bytes_dropped,
                       c->attempts_allowed - base_.attempts_allowed,
                       c->attempts_refused - base_.attempts_refused};
  }

  ScopedFd home_netns_, test_netns_, tap_, ctl_, udp_a_, udp_b_, udp6_;
  int ifindex_ = 0;
  Mac tap_mac_{};
  uint16_t port_a_ = 0, port_b_ = 0, port6_ = 0;
  std::unique_ptr<TapFilter> filter_;
  TapCounters base_;
};

TEST_F(TapFilterTest, NothingAllowedDropsEveryIpPacketButPassesArp) {
  size_t dropped = SendIp(Udp4("10.99.0.1", port_a_, "a"));
  dropped += SendIp(IcmpEcho("10.99.0.1"));
  dropped += SendIp6(Udp6("fd00:99::1", port6_, "six"));
  dropped += Send(Ethernet(tap_mac_, 0x88b5, {1, 2, 3, 4}));  // neither ARP nor IP
  auto before = Sync();
  ASSERT_TRUE(before.has_value()) << "no ARP reply";
  EXPECT_FALSE(HasEchoReply(*before));
  EXPECT_EQ(Received(udp_a_), "");
  EXPECT_EQ(Received(udp6_), "");
  const TapCounters c = Delta();
  EXPECT_EQ(c.packets_dropped, 4u);
  EXPECT_EQ(c.bytes_dropped, dropped);
  EXPECT_EQ(c.packets_allowed, 1u);  // the ARP request of Sync
  EXPECT_EQ(c.bytes_allowed, kArpFrameLen);
}

TEST_F(TapFilterTest, AnAllowedAddressAndPortAreDeliveredOthersAreNot) {
  ASSERT_TRUE(filter_->Allow(Rule(absl::StrCat("10.99.0.1:", port_a_))).ok());
  const size_t allowed = SendIp(Udp4("10.99.0.1", port_a_, "to-a"));
  size_t dropped = SendIp(Udp4("10.99.0.1", port_b_, "to-b"));
  dropped += SendIp(IcmpEcho("10.99.0.1"));  // a port rule does not cover ICMP
  auto before = Sync();
  ASSERT_TRUE(before.has_value()) << "no ARP reply";
  EXPECT_EQ(Received(udp_a_), "to-a");
  EXPECT_EQ(Received(udp_b_), "");
  EXPECT_FALSE(HasEchoReply(*before));
  const TapCounters c = Delta();
  EXPECT_EQ(c.packets_allowed, 2u);
  EXPECT_EQ(c.bytes_allowed, allowed + kArpFrameLen);
  EXPECT_EQ(c.packets_dropped, 2u);
  EXPECT_EQ(c.bytes_dropped, dropped);
}

TEST_F(TapFilterTest, ARefusedSynIsAnsweredWithAResetToTheGuest) {
  const size_t syn = SendIp(Syn4("10.99.0.1", 4444));
  auto before = Sync();
  ASSERT_TRUE(before.has_value()) << "no ARP reply";
  // RST|ACK, from the destination to the guest, acknowledging the SYN.
  std::vector<Bytes> resets = TcpWithFlags(*before, 0x14);
  ASSERT_EQ(resets.size(), 1u) << before->size() << " frames came back";
  const Bytes& r = resets[0];
  ASSERT_EQ(r.size(), 54u);
  EXPECT_TRUE(std::equal(kGuestMac.begin(), kGuestMac.end(), r.begin()));        // to the guest
  EXPECT_TRUE(std::equal(tap_mac_.begin(), tap_mac_.end(), r.begin() + 6));      // from the tap
  const Bytes ip(r.begin() + 14, r.begin() + 34), tcp(r.begin() + 34, r.end());
  EXPECT_EQ(Checksum(ip), 0) << "bad IPv4 header checksum";
  in_addr src, dst;
  std::memcpy(&src, &ip[12], 4);
  std::memcpy(&dst, &ip[16], 4);
  EXPECT_EQ(src.s_addr, V4("10.99.0.1").s_addr);
  EXPECT_EQ(dst.s_addr, V4("10.99.0.2").s_addr);
  EXPECT_EQ(TcpChecksum(src, dst, tcp), 0) << "bad TCP checksum";
  EXPECT_EQ((tcp[0] << 8) | tcp[1], 4444);
  EXPECT_EQ((tcp[2] << 8) | tcp[3], 40001);
  const uint32_t ack = (uint32_t{tcp[8]} << 24) | (tcp[9] << 16) | (tcp[10] << 8) | tcp[11];
  EXPECT_EQ(ack, kSynSeq + 1);
  const TapCounters c = Delta();
  EXPECT_EQ(c.packets_dropped, 1u);
  EXPECT_EQ(c.bytes_dropped, syn);
  EXPECT_EQ(c.attempts_refused, 1u);
  EXPECT_EQ(c.attempts_allowed, 0u);
}

TEST_F(TapFilterTest, AnAllowedSynReachesTheHostsStack) {
  ASSERT_TRUE(filter_->Allow(Rule("10.99.0.1:4444")).ok());
  SendIp(Syn4("10.99.0.1", 4444));
  auto before = Sync();
  ASSERT_TRUE(before.has_value()) << "no ARP reply";
  // Nothing listens on 4444: the host's own stack answers with its RST.
  EXPECT_EQ(TcpWithFlags(*before, 0x14).size(), 1u);
  const TapCounters c = Delta();
  EXPECT_EQ(c.packets_dropped, 0u);
  EXPECT_EQ(c.attempts_allowed, 1u);
  EXPECT_EQ(c.attempts_refused, 0u);
}

TEST_F(TapFilterTest, WithASourceRequiredOtherSourcesAreDropped) {
  ASSERT_TRUE(filter_->Allow(Rule(absl::StrCat("10.99.0.1:", port_a_))).ok());
  filter_->RequireSource(0x0a630002);  // 10.99.0.2
  SendIp(Udp4("10.99.0.1", port_a_, "spoofed", "10.99.0.3"));
  SendIp(Udp4("10.99.0.1", port_a_, "mine"));
  ASSERT_TRUE(Sync().has_value()) << "no ARP reply";
  EXPECT_EQ(Received(udp_a_), "mine");
  EXPECT_EQ(Received(udp_a_), "");
  TapCounters c = Delta();
  EXPECT_EQ(c.packets_dropped, 1u);
  EXPECT_EQ(c.attempts_allowed, 1u);
  filter_->RequireSource(0);
  SendIp(Udp4("10.99.0.1", port_a_, "any", "10.99.0.3"));
  ASSERT_TRUE(Sync().has_value()) << "no ARP reply";
  EXPECT_EQ(Received(udp_a_), "any");
}

TEST_F(TapFilterTest, IcmpNeedsARuleForEveryPortAndDenyWins) {
  ASSERT_TRUE(filter_->Allow(Rule("10.99.0.0/24")).ok());
  ASSERT_TRUE(filter_->Deny(Rule(absl::StrCat("10.99.0.1:", port_b_))).ok());
  SendIp(IcmpEcho("10.99.0.1"));
  SendIp(Udp4("10.99.0.1", port_a_, "to-a"));
  SendIp(Udp4("10.99.0.1", port_b_, "to-b"));
  auto before = Sync();
  ASSERT_TRUE(before.has_value()) << "no ARP reply";
  EXPECT_TRUE(HasEchoReply(*before));
  EXPECT_EQ(Received(udp_a_), "to-a");
  EXPECT_EQ(Received(udp_b_), "");
  EXPECT_EQ(Delta().packets_dropped, 1u);
}

TEST_F(TapFilterTest, Ipv6FollowsTheIpv6Rules) {
  ASSERT_TRUE(filter_->Allow(Rule(absl::StrCat("[fd00:99::1]:", port6_))).ok());
  SendIp6(Udp6("fd00:99::1", port6_, "six"));
  SendIp6(Udp6("fd00:99::1", static_cast<uint16_t>(port6_ + 1), "other port"));
  SendIp(Udp4("10.99.0.1", port_a_, "v4"));  // the IPv6 rule says nothing of IPv4
  ASSERT_TRUE(Sync().has_value()) << "no ARP reply";
  EXPECT_EQ(Received(udp6_), "six");
  EXPECT_EQ(Received(udp_a_), "");
  EXPECT_EQ(Delta().packets_dropped, 2u);
}

TEST_F(TapFilterTest, ChangesTakeEffectForTheNextPacket) {
  const EgressRule allow = Rule(absl::StrCat("10.99.0.1:", port_a_));
  const EgressRule deny = Rule("10.99.0.0/16");
  auto delivered = [&](const std::string& data) {
    SendIp(Udp4("10.99.0.1", port_a_, data));
    EXPECT_TRUE(Sync().has_value()) << "no ARP reply";
    return Received(udp_a_) == data;
  };
  EXPECT_FALSE(delivered("1"));
  ASSERT_TRUE(filter_->Allow(allow).ok());
  EXPECT_TRUE(delivered("2"));
  ASSERT_TRUE(filter_->Deny(deny).ok());
  EXPECT_FALSE(delivered("3"));
  ASSERT_TRUE(filter_->RemoveDeny(deny).ok());
  EXPECT_TRUE(delivered("4"));
  ASSERT_TRUE(filter_->RemoveAllow(allow).ok());
  EXPECT_FALSE(delivered("5"));
  EXPECT_EQ(filter_->RemoveAllow(allow).code(), absl::StatusCode::kNotFound);
}

TEST_F(TapFilterTest, DestroyingTheFilterDetachesItAndRemovesItsQdisc) {
  EXPECT_EQ(Delta().packets_dropped, 0u);
  SendIp(Udp4("10.99.0.1", port_a_, "before"));
  ASSERT_TRUE(Sync().has_value());
  EXPECT_EQ(Received(udp_a_), "");
  filter_.reset();
  SendIp(Udp4("10.99.0.1", port_a_, "after"));
  ASSERT_TRUE(Sync().has_value());
  EXPECT_EQ(Received(udp_a_), "after");
  // The filter made the clsact qdisc, so it took it away: making one now
  // succeeds (rather than finding one).
  bpf_tc_hook hook = {};
  hook.sz = sizeof(hook);
  hook.ifindex = ifindex_;
  hook.attach_point = BPF_TC_INGRESS;
  EXPECT_EQ(bpf_tc_hook_create(&hook), 0);
}

TEST_F(TapFilterTest, AQdiscItFoundIsLeftInPlace) {
  filter_.reset();
  bpf_tc_hook hook = {};
  hook.sz = sizeof(hook);
  hook.ifindex = ifindex_;
  hook.attach_point = BPF_TC_INGRESS;
  ASSERT_EQ(bpf_tc_hook_create(&hook), 0);  // someone else's clsact
  auto filter = TapFilter::Load();
  ASSERT_TRUE(filter.ok()) << filter.status();
  ASSERT_TRUE((*filter)->AttachToInterface(ifindex_).ok());
  SendIp(Udp4("10.99.0.1", port_a_, "filtered"));
  ASSERT_TRUE(Sync().has_value());
  EXPECT_EQ(Received(udp_a_), "");
  filter->reset();
  SendIp(Udp4("10.99.0.1", port_a_, "open"));
  ASSERT_TRUE(Sync().has_value());
  EXPECT_EQ(Received(udp_a_), "open");
  EXPECT_EQ(bpf_tc_hook_create(&hook), -EEXIST);
}

TEST_F(TapFilterTest, AttachingTwiceOrToAMissingInterfaceIsAClearError) {
  EXPECT_EQ(filter_->AttachToInterface(ifindex_).code(), absl::StatusCode::kFailedPrecondition);
  auto other = TapFilter::Load();
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ((*other)->AttachToInterface(ifindex_ + 1000).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*other)->AttachToInterface(0).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(TapFilterTest, DetachesInTheTapsNamespaceFromAnotherOne) {
  // An interface index names another interface elsewhere: destruction on a
  // thread in another namespace detaches in the tap's and comes back.
  ASSERT_EQ(setns(home_netns_.get(), CLONE_NEWNET), 0) << strerror(errno);
  filter_.reset();
  ScopedFd now(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  struct stat a, b;
  ASSERT_EQ(fstat(now.get(), &a), 0);
  ASSERT_EQ(fstat(home_netns_.get(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino) << "the thread did not come back to its namespace";
  ASSERT_EQ(setns(test_netns_.get(), CLONE_NEWNET), 0) << strerror(errno);
  SendIp(Udp4("10.99.0.1", port_a_, "open"));
  ASSERT_TRUE(Sync().has_value());
  EXPECT_EQ(Received(udp_a_), "open");
}

}  // namespace
}  // namespace dsec::bpf
