// SPDX-License-Identifier: Apache-2.0
// Runs the tap backend for real. Each test body runs on a thread of its own
// that first moves into a fresh network namespace (unshare(CLONE_NEWNET)
// affects only the calling thread); the namespace, and every tap created in
// it, disappears when that thread ends and its descriptors are closed, even
// if the test fails half-way.
#include "devices/net/tap_backend.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <linux/if_tun.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "base/scoped_fd.h"

namespace dsec::devices {
namespace {

// An EtherType from the IEEE "local experimental" range, so frames the
// kernel sends by itself (IPv6 router solicitations, MLD) can be skipped.
constexpr uint16_t kTestEtherType = 0x88b5;
constexpr int kTimeoutMs = 5000;

std::string UniqueTapName() {
  std::random_device rd;
  return absl::StrFormat("dsnt%08x", rd());
}

// Runs `body` on a new thread inside a new network namespace. Returns false
// (with the reason in *why) if the namespace cannot be created.
bool RunInPrivateNetns(const std::function<void()>& body, std::string* why) {
  bool ok = true;
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      ok = false;
      *why = absl::StrFormat("unshare(CLONE_NEWNET): %s", std::strerror(errno));
      return;
    }
    body();
  });
  t.join();
  return ok;
}

// Variadic because the body is a lambda whose commas the preprocessor sees.
#define RUN_IN_PRIVATE_NETNS(...)                                    \
  do {                                                               \
    std::string why;                                                 \
    if (!RunInPrivateNetns(__VA_ARGS__, &why)) GTEST_SKIP() << why;  \
  } while (0)

void BringUp(const std::string& name) {
  ScopedFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(sock.valid());
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  ASSERT_EQ(::ioctl(sock.get(), SIOCGIFFLAGS, &ifr), 0) << std::strerror(errno);
  ifr.ifr_flags |= IFF_UP;
  ASSERT_EQ(::ioctl(sock.get(), SIOCSIFFLAGS, &ifr), 0) << std::strerror(errno);
}

ScopedFd PacketSocket(const std::string& name) {
  ScopedFd sock(::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL)));
  EXPECT_TRUE(sock.valid()) << std::strerror(errno);
  sockaddr_ll addr{};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = static_cast<int>(::if_nametoindex(name.c_str()));
  EXPECT_EQ(::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
      << std::strerror(errno);
  return sock;
}

std::vector<uint8_t> TestFrame(uint8_t fill, size_t len) {
  std::vector<uint8_t> f(len, fill);
  const uint8_t dst[6] = {0x02, 0, 0, 0, 0, 0x01};
  const uint8_t src[6] = {0x02, 0, 0, 0, 0, 0x02};
  std::memcpy(f.data(), dst, 6);
  std::memcpy(f.data() + 6, src, 6);
  f[12] = kTestEtherType >> 8;
  f[13] = kTestEtherType & 0xff;
  return f;
}

bool IsTestFrame(const uint8_t* frame, size_t len) {
  return len >= 14 && frame[12] == (kTestEtherType >> 8) && frame[13] == (kTestEtherType & 0xff);
}

bool WaitReadable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, kTimeoutMs) == 1;
}

TEST(TapBackendTest, RejectsBadNames) {
  EXPECT_EQ(ValidateTapName("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateTapName("tap%d").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateTapName("a/b").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateTapName("0123456789abcdef").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateTapName("0123456789abcde").ok());
}

TEST(TapBackendTest, AttachingToMissingInterfaceIsNotFoundAndCreatesNothing) {
  RUN_IN_PRIVATE_NETNS([] {
    const std::string name = UniqueTapName();
    auto tap = TapBackend::Open(name, TapMode::kAttachExisting);
    EXPECT_EQ(tap.status().code(), absl::StatusCode::kNotFound) << tap.status();
    EXPECT_EQ(::if_nametoindex(name.c_str()), 0u);
  });
}

TEST(TapBackendTest, AttachingToNonTapInterfaceIsInvalidArgument) {
  RUN_IN_PRIVATE_NETNS([] {
    auto tap = TapBackend::Open("lo", TapMode::kAttachExisting);
    EXPECT_EQ(tap.status().code(), absl::StatusCode::kInvalidArgument) << tap.status();
  });
}

TEST(TapBackendTest, CreatesTransientTapThatVanishesWithTheBackend) {
  RUN_IN_PRIVATE_NETNS([] {
    const std::string name = UniqueTapName();
    {
      auto tap = TapBackend::Open(name, TapMode::kCreateTransient);
      ASSERT_TRUE(tap.ok()) << tap.status();
      EXPECT_NE(::if_nametoindex(name.c_str()), 0u);
      auto again = TapBackend::Open(name, TapMode::kCreateTransient);
      EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
      // A single-queue tap takes one owner.
      auto second = TapBackend::Open(name, TapMode::kAttachExisting);
      EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
    }
    EXPECT_EQ(::if_nametoindex(name.c_str()), 0u);
  });
}

TEST(TapBackendTest, AttachesToPersistentTapMadeByTheRuntime) {
  RUN_IN_PRIVATE_NETNS([] {
    const std::string name = UniqueTapName();
    {
      // What the sandbox runtime does: create a persistent tap and let go.
      ScopedFd fd(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
      ASSERT_TRUE(fd.valid());
      ifreq ifr{};
      std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
      ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
      ASSERT_EQ(::ioctl(fd.get(), TUNSETIFF, &ifr), 0) << std::strerror(errno);
      ASSERT_EQ(::ioctl(fd.get(), TUNSETPERSIST, 1), 0) << std::strerror(errno);
    }
    auto tap = TapBackend::Open(name, TapMode::kAttachExisting);
    ASSERT_TRUE(tap.ok()) << tap.status();
    EXPECT_EQ((*tap)->name(), name);
    // The namespace's teardown removes the persistent tap.
  });
}

// What the sandbox runtime does for a jailed monitor: make a tap, keep the
// descriptor, hand it over; `flags` as it chose them.
ScopedFd MakeTapFd(const std::string& name, short flags) {
  ScopedFd fd(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
  EXPECT_TRUE(fd.valid());
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  ifr.ifr_flags = flags;
  EXPECT_EQ(::ioctl(fd.get(), TUNSETIFF, &ifr), 0) << std::strerror(errno);
  return fd;
}

TEST(TapBackendTest, AdoptsATapDescriptorAndTheTapGoesWithIt) {
  RUN_IN_PRIVATE_NETNS([] {
    const std::string name = UniqueTapName();
    {
      auto tap = TapBackend::Adopt(MakeTapFd(name, IFF_TAP | IFF_NO_PI | IFF_VNET_HDR));
      ASSERT_TRUE(tap.ok()) << tap.status();
      EXPECT_EQ((*tap)->name(), name);
      EXPECT_TRUE((*tap)->SupportedOffloads().csum);
      const int fl = ::fcntl((*tap)->PollFd(), F_GETFL);
      EXPECT_TRUE(fl & O_NONBLOCK);
      EXPECT_NE(::if_nametoindex(name.c_str()), 0u);
    }
    // Not persistent: its last descriptor closed with the backend.
    EXPECT_EQ(::if_nametoindex(name.c_str()), 0u);
  });
}

TEST(TapBackendTest, AdoptRefusesWhatIsNotASingleQueueVnetTap) {
  RUN_IN_PRIVATE_NETNS([] {
    auto no_vnet = TapBackend::Adopt(MakeTapFd(UniqueTapName(), IFF_TAP | IFF_NO_PI));
    EXPECT_EQ(no_vnet.status().code(), absl::StatusCode::kInvalidArgument) << no_vnet.status();
    auto tun = TapBackend::Adopt(MakeTapFd(UniqueTapName(), IFF_TUN | IFF_NO_PI | IFF_VNET_HDR));
    EXPECT_EQ(tun.status().code(), absl::StatusCode::kInvalidArgument) << tun.status();
    ScopedFd unattached(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
    auto bare = TapBackend::Adopt(std::move(unattached));
    EXPECT_EQ(bare.status().code(), absl::StatusCode::kInvalidArgument) << bare.status();
    auto file = TapBackend::Adopt(ScopedFd(::open("/dev/null", O_RDWR | O_CLOEXEC)));
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
  });
}

TEST(TapBackendTest, ReportsAndAppliesOffloads) {
  RUN_IN_PRIVATE_NETNS([] {
    auto tap = TapBackend::Open(UniqueTapName(), TapMode::kCreateTransient);
    ASSERT_TRUE(tap.ok()) << tap.status();
    NetOffloads supported = (*tap)->SupportedOffloads();
    EXPECT_TRUE(supported.csum);
    EXPECT_TRUE((*tap)->SetRxOffloads(supported).ok());
    EXPECT_TRUE((*tap)->SetRxOffloads(NetOffloads{}).ok());
    EXPECT_FALSE((*tap)->SetRxOffloads(NetOffloads{.tso4 = true}).ok());
  });
}

TEST(TapBackendTest, GuestFrameReachesTheHostSide) {
  RUN_IN_PRIVATE_NETNS([] {
    const std::string name = UniqueTapName();
    auto tap = TapBackend::Open(name, TapMode::kCreateTransient);
    ASSERT_TRUE(tap.ok()) << tap.status();
    ASSERT_NO_FATAL_FAILURE(BringUp(name));
    ScopedFd sock = PacketSocket(name);
    ASSERT_TRUE(sock.valid());

    VirtioNetHdr hdr;
    std::vector<uint8_t> frame = TestFrame(0x5a, 200);
    std::array<iovec, 3> iov = {{{&hdr, sizeof(hdr)},
                                 {frame.data(), 100},
                                 {frame.data() + 100, frame.size() - 100}}};
    auto sent = (*tap)->Send(iov);
    ASSERT_TRUE(sent.ok()) << sent.status();
    EXPECT_FALSE(sent->would_block);
    EXPECT_EQ(sent->bytes, sizeof(hdr) + frame.size());

    std::vector<uint8_t> buf(2048);
    while (true) {
      ASSERT_TRUE(WaitReadable(sock.get())) << "no frame on the host side";
      ssize_t n = ::recv(sock.get(), buf.data(), buf.size(), 0);
      ASSERT_GT(n, 0) << std::strerror(errno);
      if (!IsTestFrame(buf.data(), static_cast<size_t>(n))) continue;
      ASSERT_EQ(static_cast<size_t>(n), frame.size());
      EXPECT_EQ(std::memcmp(buf.data(), frame.data(), frame.size()), 0);
      break;
    }
  });
}

TEST(TapBackendTest, HostFrameReachesTheGuestSideWithHeader) {
  RUN_IN_PRIVATE_NETNS([] {
    const std::string name = UniqueTapName();
    auto tap = TapBackend::Open(name, TapMode::kCreateTransient);
    ASSERT_TRUE(tap.ok()) << tap.status();
    ASSERT_NO_FATAL_FAILURE(BringUp(name));
    ScopedFd sock = PacketSocket(name);
    ASSERT_TRUE(sock.valid());

    // Nothing queued yet, apart from what the kernel sent on link-up.
    std::vector<uint8_t> frame = TestFrame(0xc3, 300);
    ASSERT_EQ(::send(sock.get(), frame.data(), frame.size(), 0),
              static_cast<ssize_t>(frame.size()))
        << std::strerror(errno);

    VirtioNetHdr hdr;
    std::vector<uint8_t> buf(2048);
    while (true) {
      std::array<iovec, 2> iov = {{{&hdr, sizeof(hdr)}, {buf.data(), buf.size()}}};
      auto got = (*tap)->Receive(iov);
      ASSERT_TRUE(got.ok()) << got.status();
      if (got->would_block) {
        ASSERT_TRUE(WaitReadable((*tap)->PollFd())) << "no frame on the guest side";
        continue;
      }
      ASSERT_GE(got->bytes, sizeof(hdr));
      size_t len = got->bytes - sizeof(hdr);
      if (!IsTestFrame(buf.data(), len)) continue;
      ASSERT_EQ(len, frame.size());
      EXPECT_EQ(std::memcmp(buf.data(), frame.data(), frame.size()), 0);
      EXPECT_EQ(hdr.gso_type, kNetHdrGsoNone);
      EXPECT_EQ(hdr.flags & kNetHdrFNeedsCsum, 0);
      break;
    }
    // The queue is drained: a non-blocking read says so instead of waiting.
    while (true) {
      std::array<iovec, 2> iov = {{{&hdr, sizeof(hdr)}, {buf.data(), buf.size()}}};
      auto got = (*tap)->Receive(iov);
      ASSERT_TRUE(got.ok());
      if (got->would_block) break;
    }
  });
}

TEST(TapBackendTest, ReportsTruncationWhenFrameExceedsBuffers) {
  RUN_IN_PRIVATE_NETNS([] {
    const std::string name = UniqueTapName();
    auto tap = TapBackend::Open(name, TapMode::kCreateTransient);
    ASSERT_TRUE(tap.ok()) << tap.status();
    ASSERT_NO_FATAL_FAILURE(BringUp(name));
    ScopedFd sock = PacketSocket(name);
    ASSERT_TRUE(sock.valid());
    std::vector<uint8_t> frame = TestFrame(0x11, 1000);
    ASSERT_EQ(::send(sock.get(), frame.data(), frame.size(), 0),
              static_cast<ssize_t>(frame.size()));
    VirtioNetHdr hdr;
    std::vector<uint8_t> buf(64);
    uint8_t spare = 0;
    while (true) {
      std::array<iovec, 3> iov = {{{&hdr, sizeof(hdr)}, {buf.data(), buf.size()}, {&spare, 1}}};
      auto got = (*tap)->Receive(iov);
      ASSERT_TRUE(got.ok()) << got.status();
      if (got->would_block) {
        ASSERT_TRUE(WaitReadable((*tap)->PollFd()));
        continue;
      }
      if (!IsTestFrame(buf.data(), std::min(got->bytes - sizeof(hdr), buf.size()))) continue;
      // The spare byte after the buffers was used: the frame did not fit.
      EXPECT_EQ(got->bytes, sizeof(hdr) + buf.size() + 1);
      break;
    }
  });
}

}  // namespace
}  // namespace dsec::devices
