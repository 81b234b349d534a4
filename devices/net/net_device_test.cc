// SPDX-License-Identifier: Apache-2.0
#include "devices/net/net_device.h"

#include <sys/epoll.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include "devices/net/fake_net_backend.h"
#include "devices/virtio/queue.h"
#include "devices/virtio/virtqueue_builder.h"
#include "gtest/gtest.h"
#include "base/event_loop.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::devices {
namespace {

using virtio::VirtQueueBuilder;

constexpr uint16_t kQueueSize = 16;
constexpr NetOffloads kAllOffloads{.csum = true, .tso4 = true, .tso6 = true};

class FakeNotifier : public virtio::DriverNotifier {
 public:
  void SignalUsed(uint16_t queue_index) override { ++used_signals[queue_index]; }
  void SignalConfigChanged() override {}
  void ReportBroken(const absl::Status& reason) override { broken = reason; }
  int used_signals[2] = {0, 0};
  absl::Status broken;
};

std::vector<uint8_t> HdrBytes(const VirtioNetHdr& hdr) {
  std::vector<uint8_t> out(sizeof(hdr));
  std::memcpy(out.data(), &hdr, sizeof(hdr));
  return out;
}

std::vector<uint8_t> Frame(size_t len, uint8_t fill) {
  std::vector<uint8_t> f(len, fill);
  f[0] = 0x02;   // destination: a locally administered unicast address
  f[12] = 0x08;  // EtherType IPv4
  f[13] = 0x00;
  return f;
}

class NetDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mem_ = memory::FakeGuestMemory::Create({{0, 1 << 20}}).value();
    rx_vq_ = std::make_unique<VirtQueueBuilder>(*mem_, 0x1000, kQueueSize);
    tx_vq_ = std::make_unique<VirtQueueBuilder>(*mem_, 0x50000, kQueueSize);
    loop_ = EventLoop::Create().value();
  }

  // Creates the device over a fake backend and activates it with `acked`.
  void Start(uint64_t acked = 0, NetOffloads supported = NetOffloads{},
             NetDeviceConfig config = NetDeviceConfig{}) {
    auto backend = std::make_unique<FakeNetBackend>(supported);
    backend_ = backend.get();
    config.queue_size = kQueueSize;
    auto dev = NetDevice::Create(std::move(config), std::move(backend));
    ASSERT_TRUE(dev.ok()) << dev.status();
    dev_ = std::move(*dev);
    const uint64_t ring_features = virtio::kFeatureVersion1 | virtio::kFeatureRingEventIdx;
    queues_.clear();
    queues_.push_back(rx_vq_->MakeQueue(ring_features));
    queues_.push_back(tx_vq_->MakeQueue(ring_features));
    virtio::ActivateContext ctx{
        .acked_features = acked | ring_features,
        .memory = mem_.get(),
        .queues = queues_,
        .notifier = &notifier_,
        .loop = loop_.get(),
    };
    ASSERT_TRUE(dev_->Activate(ctx).ok());
  }

  void TearDown() override {
    if (dev_) dev_->Reset();
  }

  // Runs the loop until `done` holds (or 5 s pass).
  bool RunUntil(const std::function<bool()>& done) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      EXPECT_TRUE(loop_->RunOnce(10).ok());
    }
    return true;
  }

  // True if the device currently has the backend's fd in the loop (Add
  // refuses an fd that is already watched).
  bool DeviceWatchesBackend() {
    absl::Status s = loop_->Add(backend_->PollFd(), EPOLLIN, [](uint32_t) {});
    if (s.ok()) {
      EXPECT_TRUE(loop_->Remove(backend_->PollFd()).ok());
      return false;
    }
    return s.code() == absl::StatusCode::kAlreadyExists;
  }

  VirtioNetHdr RxHeader(uint64_t gpa) {
    return mem_->ReadObj<VirtioNetHdr>(gpa).value();
  }

  std::unique_ptr<memory::FakeGuestMemory> mem_;
  std::unique_ptr<VirtQueueBuilder> rx_vq_;
  std::unique_ptr<VirtQueueBuilder> tx_vq_;
  std::unique_ptr<EventLoop> loop_;
  std::vector<virtio::Queue> queues_;
  FakeNotifier notifier_;
  FakeNetBackend* backend_ = nullptr;
  std::unique_ptr<NetDevice> dev_;
};

TEST_F(NetDeviceTest, OffersOffloadsOnlyWhenBackendAcceptsThem) {
  Start(0, NetOffloads{});
  uint64_t f = dev_->device_features();
  EXPECT_EQ(dev_->device_type(), virtio::DeviceType::kNet);
  EXPECT_EQ(dev_->num_queues(), 2);
  EXPECT_TRUE(f & kNetFMac);
  EXPECT_TRUE(f & kNetFMtu);
  EXPECT_TRUE(f & kNetFStatus);
  EXPECT_FALSE(f & (kNetFCsum | kNetFGuestCsum | kNetFHostTso4 | kNetFGuestTso6));
  EXPECT_FALSE(f & kNetFMrgRxbuf);

  auto all = NetDevice::Create(NetDeviceConfig{}, std::make_unique<FakeNetBackend>(kAllOffloads));
  ASSERT_TRUE(all.ok());
  uint64_t g = (*all)->device_features();
  EXPECT_TRUE(g & kNetFCsum && g & kNetFGuestCsum);
  EXPECT_TRUE(g & kNetFHostTso4 && g & kNetFHostTso6 && g & kNetFGuestTso4 && g & kNetFGuestTso6);
}

TEST_F(NetDeviceTest, ConfigSpaceHoldsMacLinkUpOnePairAndMtu) {
  NetDeviceConfig config;
  config.mac = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
  config.mtu = 9000;
  Start(0, NetOffloads{}, config);
  uint8_t buf[12];
  for (uint64_t i = 0; i < sizeof(buf); ++i) dev_->ReadConfig(i, std::span<uint8_t>(&buf[i], 1));
  EXPECT_EQ(buf[0], 0x02);
  EXPECT_EQ(buf[5], 0x55);
  uint16_t status, pairs, mtu;
  std::memcpy(&status, buf + 6, 2);
  std::memcpy(&pairs, buf + 8, 2);
  std::memcpy(&mtu, buf + 10, 2);
  EXPECT_EQ(status, kNetSLinkUp);
  EXPECT_EQ(pairs, 1);
  EXPECT_EQ(mtu, 9000);
  // Past the struct (and far past it): zeros.
  uint8_t wide[8];
  std::memset(wide, 0xff, sizeof(wide));
  dev_->ReadConfig(10, wide);
  EXPECT_EQ(wide[2], 0);
  dev_->ReadConfig(~uint64_t{0} - 2, wide);
  EXPECT_EQ(wide[0], 0);
  // Writes are ignored.
  uint8_t zero = 0;
  dev_->WriteConfig(0, std::span<const uint8_t>(&zero, 1));
  dev_->ReadConfig(0, std::span<uint8_t>(buf, 1));
  EXPECT_EQ(buf[0], 0x02);
}

TEST_F(NetDeviceTest, RefusesBadConfig) {
  NetDeviceConfig multicast;
  multicast.mac = {0x01, 0, 0x5e, 0, 0, 1};
  EXPECT_FALSE(NetDevice::Create(multicast, std::make_unique<FakeNetBackend>()).ok());
  NetDeviceConfig tiny_mtu;
  tiny_mtu.mtu = 40;
  EXPECT_FALSE(NetDevice::Create(tiny_mtu, std::make_unique<FakeNetBackend>()).ok());
  NetDeviceConfig odd_queue;
  odd_queue.queue_size = 100;
  EXPECT_FALSE(NetDevice::Create(odd_queue, std::make_unique<FakeNetBackend>()).ok());
  EXPECT_FALSE(NetDevice::Create(NetDeviceConfig{}, nullptr).ok());
}

TEST_F(NetDeviceTest, ActivateRejectsTsoWithoutChecksumOffload) {
  auto dev = NetDevice::Create(NetDeviceConfig{}, std::make_unique<FakeNetBackend>(kAllOffloads));
  ASSERT_TRUE(dev.ok());
  queues_.push_back(rx_vq_->MakeQueue());
  queues_.push_back(tx_vq_->MakeQueue());
  virtio::ActivateContext ctx{.acked_features = kNetFGuestTso4,
                              .memory = mem_.get(),
                              .queues = queues_,
                              .notifier = &notifier_,
                              .loop = loop_.get()};
  EXPECT_EQ((*dev)->Activate(ctx).code(), absl::StatusCode::kInvalidArgument);
  (*dev)->Reset();
}

TEST_F(NetDeviceTest, ActivateAppliesNegotiatedGuestOffloadsToBackend) {
  Start(kNetFCsum | kNetFGuestCsum | kNetFGuestTso4, kAllOffloads);
  EXPECT_EQ(backend_->rx_offloads(), (NetOffloads{.csum = true, .tso4 = true, .tso6 = false}));
}

TEST_F(NetDeviceTest, TransmitsChainToBackendAndReturnsIt) {
  Start();
  std::vector<uint8_t> frame = Frame(60, 0x77);
  auto chain = tx_vq_->AddChain({HdrBytes(VirtioNetHdr{}), frame}, {});
  dev_->QueueNotify(NetDevice::kTxQueue);
  ASSERT_EQ(backend_->sent().size(), 1u);
  EXPECT_EQ(backend_->sent()[0].bytes, frame);
  ASSERT_EQ(tx_vq_->used_idx(), 1);
  EXPECT_EQ(tx_vq_->used(0).id, chain.head);
  EXPECT_EQ(tx_vq_->used(0).len, 0u);
  EXPECT_EQ(notifier_.used_signals[NetDevice::kTxQueue], 1);
  NetMetrics m = dev_->metrics();
  EXPECT_EQ(m.tx_packets, 1u);
  EXPECT_EQ(m.tx_bytes, 60u);
  EXPECT_EQ(m.tx_dropped, 0u);
}

TEST_F(NetDeviceTest, DropsMalformedTransmitChainButReturnsIt) {
  Start();
  VirtioNetHdr csum;
  csum.flags = kNetHdrFNeedsCsum;  // CSUM was not negotiated
  tx_vq_->AddChain({HdrBytes(csum), Frame(60, 1)}, {});
  tx_vq_->AddChain({{1, 2, 3, 4, 5}}, {});  // shorter than the header
  dev_->QueueNotify(NetDevice::kTxQueue);
  EXPECT_TRUE(backend_->sent().empty());
  EXPECT_EQ(tx_vq_->used_idx(), 2);
  EXPECT_EQ(dev_->metrics().tx_dropped, 2u);
  EXPECT_TRUE(notifier_.broken.ok());
}

TEST_F(NetDeviceTest, DeliversBackendFrameIntoReceiveBufferWithHeader) {
  Start();
  auto chain = rx_vq_->AddChain({}, {1526});
  dev_->QueueNotify(NetDevice::kRxQueue);
  VirtioNetHdr from_tap;
  from_tap.flags = kNetHdrFDataValid;  // GUEST_CSUM not negotiated: cleared
  from_tap.num_buffers = 0x4242;       // tap leaves these bytes alone
  std::vector<uint8_t> frame = Frame(100, 0x33);
  backend_->Inject(from_tap, frame);
  ASSERT_TRUE(RunUntil([&] { return rx_vq_->used_idx() == 1; }));
  EXPECT_EQ(rx_vq_->used(0).id, chain.head);
  EXPECT_EQ(rx_vq_->used(0).len, 12u + 100u);
  VirtioNetHdr hdr = RxHeader(chain.writable[0].gpa);
  EXPECT_EQ(hdr.num_buffers, 1);
  EXPECT_EQ(hdr.flags, 0);
  EXPECT_EQ(rx_vq_->ReadBytes(chain.writable[0].gpa + 12, 100), frame);
  EXPECT_GE(notifier_.used_signals[NetDevice::kRxQueue], 1);
  EXPECT_EQ(dev_->metrics().rx_packets, 1u);
  EXPECT_EQ(dev_->metrics().rx_bytes, 100u);
}

TEST_F(NetDeviceTest, StopsReadingBackendWithoutReceiveBuffersUntilKicked) {
  Start();
  backend_->Inject(VirtioNetHdr{}, Frame(60, 9));
  // The device looks once, finds no buffers and stops watching the backend
  // instead of spinning on a readable fd.
  ASSERT_TRUE(loop_->RunOnce(0).ok());
  EXPECT_FALSE(DeviceWatchesBackend());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(loop_->RunOnce(0).ok());
  EXPECT_EQ(backend_->receive_calls(), 0u);
  EXPECT_EQ(backend_->pending(), 1u);

  rx_vq_->AddChain({}, {1526});
  rx_vq_->AddChain({}, {1526});
  dev_->QueueNotify(NetDevice::kRxQueue);
  EXPECT_EQ(rx_vq_->used_idx(), 1);
  EXPECT_EQ(backend_->pending(), 0u);
  // A buffer is left and the backend is empty: wait for the backend.
  EXPECT_TRUE(DeviceWatchesBackend());
}

TEST_F(NetDeviceTest, DropsFrameLargerThanReceiveBufferAndReusesBuffer) {
  Start();
  auto chain = rx_vq_->AddChain({}, {12 + 100});
  backend_->Inject(VirtioNetHdr{}, Frame(101, 1));
  std::vector<uint8_t> fits = Frame(100, 2);
  backend_->Inject(VirtioNetHdr{}, fits);
  dev_->QueueNotify(NetDevice::kRxQueue);
  ASSERT_EQ(rx_vq_->used_idx(), 1);
  EXPECT_EQ(rx_vq_->used(0).id, chain.head);
  EXPECT_EQ(rx_vq_->used(0).len, 112u);
  EXPECT_EQ(rx_vq_->ReadBytes(chain.writable[0].gpa + 12, 100), fits);
  EXPECT_EQ(dev_->metrics().rx_dropped, 1u);
  EXPECT_EQ(dev_->metrics().rx_packets, 1u);
}

TEST_F(NetDeviceTest, DropsReceivedOffloadTheGuestDidNotNegotiate) {
  Start();
  rx_vq_->AddChain({}, {1526});
  VirtioNetHdr partial;
  partial.flags = kNetHdrFNeedsCsum;
  partial.csum_start = 34;
  partial.csum_offset = 6;
  backend_->Inject(partial, Frame(100, 1));
  dev_->QueueNotify(NetDevice::kRxQueue);
  EXPECT_EQ(rx_vq_->used_idx(), 0);
  EXPECT_EQ(dev_->metrics().rx_dropped, 1u);
}

TEST_F(NetDeviceTest, HandsBackChainTooSmallForAnyFrameEmpty) {
  Start();
  rx_vq_->AddChain({}, {20});
  backend_->Inject(VirtioNetHdr{}, Frame(60, 1));
  dev_->QueueNotify(NetDevice::kRxQueue);
  ASSERT_EQ(rx_vq_->used_idx(), 1);
  EXPECT_EQ(rx_vq_->used(0).len, 0u);
  EXPECT_EQ(backend_->pending(), 1u);
}

TEST_F(NetDeviceTest, TransmitWaitsWhileBackendWouldBlock) {
  Start();
  backend_->set_send_blocked(true);
  tx_vq_->AddChain({HdrBytes(VirtioNetHdr{}), Frame(60, 5)}, {});
  dev_->QueueNotify(NetDevice::kTxQueue);
  EXPECT_EQ(tx_vq_->used_idx(), 0);
  EXPECT_TRUE(DeviceWatchesBackend());
  backend_->set_send_blocked(false);
  ASSERT_TRUE(RunUntil([&] { return tx_vq_->used_idx() == 1; }));
  EXPECT_EQ(backend_->sent().size(), 1u);
  EXPECT_EQ(dev_->metrics().tx_dropped, 0u);
}

TEST_F(NetDeviceTest, TransmitRateLimitDefersInsteadOfDropping) {
  FakeClock clock(1'000'000'000);
  NetDeviceConfig config;
  config.clock = &clock;
  config.tx_limit.packets_per_second = 1000;  // one frame per millisecond
  config.tx_limit.packets_burst = 1;
  Start(0, NetOffloads{}, config);
  for (int i = 0; i < 3; ++i) tx_vq_->AddChain({HdrBytes(VirtioNetHdr{}), Frame(60, i)}, {});
  dev_->QueueNotify(NetDevice::kTxQueue);
  EXPECT_EQ(backend_->sent().size(), 1u);
  EXPECT_EQ(tx_vq_->used_idx(), 1);
  EXPECT_GE(dev_->metrics().tx_throttled, 1u);
  // A kick while throttled changes nothing.
  dev_->QueueNotify(NetDevice::kTxQueue);
  EXPECT_EQ(backend_->sent().size(), 1u);
  ASSERT_TRUE(RunUntil([&] {
    clock.AdvanceNs(1'000'000);
    return backend_->sent().size() == 3;
  }));
  EXPECT_EQ(tx_vq_->used_idx(), 3);
  EXPECT_EQ(dev_->metrics().tx_dropped, 0u);
}

TEST_F(NetDeviceTest, ReceiveRateLimitDefersInsteadOfDropping) {
  FakeClock clock(1'000'000'000);
  NetDeviceConfig config;
  config.clock = &clock;
  config.rx_limit.bytes_per_second = 100'000;  // 100 bytes per millisecond
  config.rx_limit.bytes_burst = 100;
  Start(0, NetOffloads{}, config);
  for (int i = 0; i < 3; ++i) rx_vq_->AddChain({}, {1526});
  for (int i = 0; i < 3; ++i) backend_->Inject(VirtioNetHdr{}, Frame(150, i));
  dev_->QueueNotify(NetDevice::kRxQueue);
  // The first frame overdraws the bucket; the rest wait for the debt.
  EXPECT_EQ(rx_vq_->used_idx(), 1);
  EXPECT_EQ(dev_->metrics().rx_throttled, 1u);
  EXPECT_FALSE(DeviceWatchesBackend());
  ASSERT_TRUE(RunUntil([&] {
    clock.AdvanceNs(500'000);
    return rx_vq_->used_idx() == 3;
  }));
  EXPECT_EQ(dev_->metrics().rx_dropped, 0u);
  EXPECT_EQ(dev_->metrics().rx_packets, 3u);
}

TEST_F(NetDeviceTest, ResetRemovesBackendFromLoopAndCanActivateAgain) {
  Start();
  EXPECT_TRUE(DeviceWatchesBackend());
  dev_->Reset();
  EXPECT_FALSE(DeviceWatchesBackend());
  queues_.clear();
  queues_.push_back(rx_vq_->MakeQueue());
  queues_.push_back(tx_vq_->MakeQueue());
  virtio::ActivateContext ctx{.acked_features = 0,
                              .memory = mem_.get(),
                              .queues = queues_,
                              .notifier = &notifier_,
                              .loop = loop_.get()};
  EXPECT_TRUE(dev_->Activate(ctx).ok());
  EXPECT_TRUE(DeviceWatchesBackend());
}

TEST_F(NetDeviceTest, ARestoredDeviceAnswersTheSavedMacOnItsOwnBackend) {
  NetDeviceConfig saved_config;
  saved_config.mac = {0x02, 0x00, 0x0a, 0xc9, 0x00, 0x02};
  auto saved = NetDevice::Create(saved_config, std::make_unique<FakeNetBackend>(NetOffloads{}));
  ASSERT_TRUE(saved.ok()) << saved.status();
  absl::StatusOr<nlohmann::json> state = (*saved)->SaveState();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(*state, (nlohmann::json{{"mac", "02:00:0a:c9:00:02"}, {"mtu", 1500}}));

  // A fork's child: another backend and MAC; the guest keeps the saved MAC.
  NetDeviceConfig child_config;
  child_config.mac = {0x02, 0x00, 0x0a, 0xc9, 0x00, 0x07};
  Start(0, NetOffloads{}, child_config);
  dev_->Reset();
  ASSERT_TRUE(dev_->RestoreState(*state).ok());
  uint8_t mac[6];
  for (uint64_t i = 0; i < sizeof(mac); ++i) dev_->ReadConfig(i, std::span<uint8_t>(&mac[i], 1));
  EXPECT_EQ(mac[5], 0x02);
  EXPECT_EQ(*dev_->SaveState(), *state);

  // Refused: another MTU, a damaged or hostile state; nothing changes.
  nlohmann::json other_mtu = *state;
  other_mtu["mtu"] = 9000;
  absl::Status refused = dev_->RestoreState(other_mtu);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_NE(refused.message().find("MTU"), std::string::npos) << refused;
  for (const nlohmann::json& bad :
       {nlohmann::json::array(), nlohmann::json{{"mac", "02:00:0a:c9:00:02"}},
        nlohmann::json{{"mac", "01:00:5e:00:00:01"}, {"mtu", 1500}},
        nlohmann::json{{"mac", "nonsense"}, {"mtu", 1500}}, nlohmann::json{{"mac", 7}, {"mtu", 1500}},
        nlohmann::json{{"mac", "02:00:0a:c9:00:02"}, {"mtu", -1}},
        nlohmann::json{{"mac", "02:00:0a:c9:00:02"}, {"mtu", 1500}, {"extra", 1}}}) {
    absl::Status s = dev_->RestoreState(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad.dump() << ": " << s;
  }
  dev_->ReadConfig(5, std::span<uint8_t>(&mac[5], 1));
  EXPECT_EQ(mac[5], 0x02);
}

TEST_F(NetDeviceTest, RingViolationMarksDeviceBroken) {
  Start();
  // A head index beyond the queue size (virtio 1.2 section 2.7.13.2).
  tx_vq_->PushAvail(kQueueSize + 3);
  dev_->QueueNotify(NetDevice::kTxQueue);
  EXPECT_FALSE(notifier_.broken.ok());
  EXPECT_FALSE(DeviceWatchesBackend());
}

}  // namespace
}  // namespace dsec::devices
