// SPDX-License-Identifier: Apache-2.0
// NetDevice over a real tap, in a private network namespace owned by the
// test thread (see tap_backend_test.cc): guest chains out through the tap
// to an AF_PACKET socket, and back into guest receive buffers.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "devices/net/net_device.h"
#include "devices/net/tap_backend.h"
#include "devices/virtio/queue.h"
#include "devices/virtio/virtqueue_builder.h"
#include "gtest/gtest.h"
#include "base/event_loop.h"
#include "base/scoped_fd.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::devices {
namespace {

constexpr uint16_t kTestEtherType = 0x88b5;  // IEEE local experimental

class NullNotifier : public virtio::DriverNotifier {
 public:
  void SignalUsed(uint16_t) override {}
  void SignalConfigChanged() override {}
  void ReportBroken(const absl::Status& reason) override { broken = reason; }
  absl::Status broken;
};

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

void Body() {
  std::random_device rd;
  const std::string name = absl::StrFormat("dsnd%08x", rd());
  auto tap = TapBackend::Open(name, TapMode::kCreateTransient);
  ASSERT_TRUE(tap.ok()) << tap.status();
  {
    ScopedFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
    ASSERT_EQ(::ioctl(sock.get(), SIOCGIFFLAGS, &ifr), 0);
    ifr.ifr_flags |= IFF_UP;
    ASSERT_EQ(::ioctl(sock.get(), SIOCSIFFLAGS, &ifr), 0);
  }
  ScopedFd pkt(::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL)));
  ASSERT_TRUE(pkt.valid());
  sockaddr_ll addr{};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = static_cast<int>(::if_nametoindex(name.c_str()));
  ASSERT_EQ(::bind(pkt.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);

  auto mem = memory::FakeGuestMemory::Create({{0, 1 << 20}}).value();
  virtio::VirtQueueBuilder rx_vq(*mem, 0x1000, 16);
  virtio::VirtQueueBuilder tx_vq(*mem, 0x50000, 16);
  auto loop = EventLoop::Create().value();
  NetDeviceConfig config;
  config.id = name;
  config.queue_size = 16;
  auto dev = NetDevice::Create(config, std::move(*tap));
  ASSERT_TRUE(dev.ok()) << dev.status();
  std::vector<virtio::Queue> queues;
  queues.push_back(rx_vq.MakeQueue(virtio::kFeatureVersion1));
  queues.push_back(tx_vq.MakeQueue(virtio::kFeatureVersion1));
  NullNotifier notifier;
  const uint64_t acked = (*dev)->device_features() & ~virtio::kFeatureRingEventIdx;
  ASSERT_TRUE((*dev)
                  ->Activate({.acked_features = acked | virtio::kFeatureVersion1,
                              .memory = mem.get(),
                              .queues = queues,
                              .notifier = &notifier,
                              .loop = loop.get()})
                  .ok());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);

  // Guest -> host.
  std::vector<uint8_t> out = TestFrame(0x42, 120);
  std::vector<uint8_t> hdr(sizeof(VirtioNetHdr), 0);
  tx_vq.AddChain({hdr, out}, {});
  (*dev)->QueueNotify(NetDevice::kTxQueue);
  EXPECT_EQ(tx_vq.used_idx(), 1);
  std::vector<uint8_t> buf(2048);
  bool seen = false;
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    pollfd p{pkt.get(), POLLIN, 0};
    if (::poll(&p, 1, 100) != 1) continue;
    ssize_t n = ::recv(pkt.get(), buf.data(), buf.size(), 0);
    if (n == static_cast<ssize_t>(out.size()) && std::memcmp(buf.data(), out.data(), n) == 0) {
      seen = true;
    }
  }
  EXPECT_TRUE(seen) << "guest frame never reached the host side";

  // Host -> guest: every frame the kernel sends on its own (IPv6 router
  // solicitations, ...) lands in a buffer too, so offer several.
  std::vector<virtio::VirtQueueBuilder::AddedChain> chains;
  for (int i = 0; i < 8; ++i) chains.push_back(rx_vq.AddChain({}, {1526}));
  (*dev)->QueueNotify(NetDevice::kRxQueue);
  std::vector<uint8_t> in = TestFrame(0x24, 300);
  ASSERT_EQ(::send(pkt.get(), in.data(), in.size(), 0), static_cast<ssize_t>(in.size()));
  bool delivered = false;
  uint16_t checked = 0;
  while (!delivered && std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(loop->RunOnce(100).ok());
    for (; checked < rx_vq.used_idx(); ++checked) {
      virtio::VirtqUsedElem used = rx_vq.used(checked);
      for (const auto& c : chains) {
        if (c.head != used.id || used.len != 12 + in.size()) continue;
        auto bytes = rx_vq.ReadBytes(c.writable[0].gpa, used.len);
        VirtioNetHdr h;
        std::memcpy(&h, bytes.data(), sizeof(h));
        EXPECT_EQ(h.num_buffers, 1);
        if (std::equal(in.begin(), in.end(), bytes.begin() + 12)) delivered = true;
      }
    }
  }
  EXPECT_TRUE(delivered) << "host frame never reached a guest buffer";
  EXPECT_TRUE(notifier.broken.ok()) << notifier.broken;
  EXPECT_EQ((*dev)->metrics().tx_packets, 1u);
  (*dev)->Reset();
}

TEST(NetTapDeviceTest, FramesFlowBothWaysThroughARealTap) {
  bool unshared = true;
  std::string why;
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      unshared = false;
      why = std::strerror(errno);
      return;
    }
    Body();
  });
  t.join();
  if (!unshared) GTEST_SKIP() << "unshare(CLONE_NEWNET): " << why;
}

}  // namespace
}  // namespace dsec::devices
