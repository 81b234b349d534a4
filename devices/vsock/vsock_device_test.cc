// SPDX-License-Identifier: Apache-2.0
// The device end to end over rings laid out by VirtQueueBuilder: with a
// recording fake backend, and once with the real unix backend.
#include "devices/vsock/vsock_device.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>

#include "devices/virtio/virtqueue_builder.h"
#include "devices/vsock/unix_backend.h"
#include "gtest/gtest.h"
#include "base/event_loop.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::devices {
namespace {

constexpr uint64_t kGuestCid = 42;

class RecordingBackend : public VsockBackend {
 public:
  void HandleGuestPacket(const VsockPacket& p) override { received.push_back(p); }
  bool HasRxPacket() const override { return !to_guest.empty(); }
  std::optional<VsockPacket> PopRxPacket(uint32_t max_payload) override {
    if (to_guest.empty() || to_guest.front().payload.size() > max_payload) return std::nullopt;
    VsockPacket p = std::move(to_guest.front());
    to_guest.pop_front();
    return p;
  }
  void SetRxReadyCallback(std::function<void()> cb) override { rx_ready = std::move(cb); }
  void ResetConnections() override { ++resets; }

  std::vector<VsockPacket> received;
  std::deque<VsockPacket> to_guest;
  std::function<void()> rx_ready;
  int resets = 0;
};

class FakeNotifier : public virtio::DriverNotifier {
 public:
  void SignalUsed(uint16_t q) override { ++used[q]; }
  void SignalConfigChanged() override {}
  void ReportBroken(const absl::Status& s) override {
    broken = s;
    ++broken_reports;
  }
  int used[3] = {};
  absl::Status broken;
  int broken_reports = 0;
};

VsockHeader GuestHeader(VsockOp op, uint32_t src_port, uint32_t dst_port, uint32_t len = 0) {
  VsockHeader h;
  h.src_cid = kGuestCid;
  h.dst_cid = kVsockHostCid;
  h.src_port = src_port;
  h.dst_port = dst_port;
  h.len = len;
  h.op = op;
  h.buf_alloc = 64 * 1024;
  return h;
}

std::vector<uint8_t> Bytes(const VsockHeader& h, const std::string& payload = "") {
  VsockWireHeader w = EncodeVsockHeader(h);
  std::vector<uint8_t> out(kVsockHeaderSize + payload.size());
  std::memcpy(out.data(), &w, kVsockHeaderSize);
  std::memcpy(out.data() + kVsockHeaderSize, payload.data(), payload.size());
  return out;
}

class VsockDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mem_ = std::move(memory::FakeGuestMemory::Create({{0, 4 << 20}})).value();
    loop_ = std::move(EventLoop::Create()).value();
    rx_ = std::make_unique<virtio::VirtQueueBuilder>(*mem_, 0x10000, 16);
    tx_ = std::make_unique<virtio::VirtQueueBuilder>(*mem_, 0x100000, 16);
    ev_ = std::make_unique<virtio::VirtQueueBuilder>(*mem_, 0x200000, 4);
    queues_ = {rx_->MakeQueue(), tx_->MakeQueue(), ev_->MakeQueue()};
  }
  void Activate(VsockBackend* backend) {
    device_ = std::move(VsockDevice::Create(kGuestCid, backend)).value();
    virtio::ActivateContext ctx;
    ctx.memory = mem_.get();
    ctx.queues = queues_;
    ctx.notifier = &notifier_;
    ctx.loop = loop_.get();
    ASSERT_TRUE(device_->Activate(ctx).ok());
  }
  // The packet in rx used entry `i`.
  VsockPacket RxPacket(uint16_t i, const virtio::VirtQueueBuilder::AddedChain& chain) {
    virtio::VirtqUsedElem e = rx_->used(i);
    EXPECT_EQ(e.id, chain.head);
    EXPECT_GE(e.len, kVsockHeaderSize);
    std::vector<uint8_t> raw = rx_->ReadBytes(chain.writable[0].gpa, e.len);
    VsockWireHeader w;
    std::memcpy(&w, raw.data(), kVsockHeaderSize);
    VsockPacket p;
    p.hdr = DecodeVsockHeader(w);
    p.payload.assign(raw.begin() + kVsockHeaderSize, raw.end());
    return p;
  }

  std::unique_ptr<memory::FakeGuestMemory> mem_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<virtio::VirtQueueBuilder> rx_, tx_, ev_;
  std::vector<virtio::Queue> queues_;
  FakeNotifier notifier_;
  std::unique_ptr<VsockDevice> device_;
};

TEST_F(VsockDeviceTest, RefusesReservedCids) {
  RecordingBackend backend;
  EXPECT_FALSE(VsockDevice::Create(2, &backend).ok());
  EXPECT_FALSE(VsockDevice::Create(0xffffffff, &backend).ok());
  EXPECT_TRUE(VsockDevice::Create(3, &backend).ok());
}

TEST_F(VsockDeviceTest, ReportsTypeQueuesAndGuestCidInConfig) {
  RecordingBackend backend;
  auto dev = std::move(VsockDevice::Create(0x107, &backend))
                 .value();
  EXPECT_EQ(dev->device_type(), virtio::DeviceType::kVsock);
  EXPECT_EQ(dev->num_queues(), 3);
  EXPECT_EQ(dev->device_features() & 0xffffff, 0u);  // no SEQPACKET
  uint8_t cid[8];
  dev->ReadConfig(0, cid);
  uint64_t value;
  std::memcpy(&value, cid, 8);
  EXPECT_EQ(value, 0x107u);
  uint8_t hi[4] = {1, 1, 1, 1};
  dev->ReadConfig(4, hi);
  EXPECT_EQ(hi[0] | hi[1] | hi[2] | hi[3], 0);
  uint8_t beyond[4] = {1, 1, 1, 1};
  dev->ReadConfig(8, beyond);
  EXPECT_EQ(beyond[0] | beyond[3], 0);
  dev->ReadConfig(~0ull - 1, beyond);  // no overflow past the end
  EXPECT_EQ(beyond[0], 0);
}

TEST_F(VsockDeviceTest, TxPacketsReachBackendAndBuffersAreReturned) {
  RecordingBackend backend;
  Activate(&backend);
  tx_->AddChain({Bytes(GuestHeader(VsockOp::kRequest, 1000, 52))}, {});
  // Header and payload in separate descriptors, as Linux sends them.
  VsockHeader rw = GuestHeader(VsockOp::kRw, 1000, 52, 3);
  tx_->AddChain({Bytes(rw), {'a', 'b', 'c'}}, {});
  device_->QueueNotify(VsockDevice::kTxQueue);
  ASSERT_EQ(backend.received.size(), 2u);
  EXPECT_EQ(backend.received[0].hdr.op, VsockOp::kRequest);
  EXPECT_EQ(std::string(backend.received[1].payload.begin(), backend.received[1].payload.end()),
            "abc");
  EXPECT_EQ(tx_->used_idx(), 2);
  EXPECT_EQ(tx_->used(0).len, 0u);
  EXPECT_EQ(notifier_.used[VsockDevice::kTxQueue], 1);
  EXPECT_EQ(device_->metrics().tx_packets, 2u);
}

TEST_F(VsockDeviceTest, InvalidTxPacketIsDroppedAndCounted) {
  RecordingBackend backend;
  Activate(&backend);
  VsockHeader spoofed = GuestHeader(VsockOp::kRequest, 1000, 52);
  spoofed.src_cid = 7;
  tx_->AddChain({Bytes(spoofed)}, {});
  tx_->AddChain({{1, 2, 3}}, {});  // shorter than a header
  device_->QueueNotify(VsockDevice::kTxQueue);
  EXPECT_TRUE(backend.received.empty());
  EXPECT_EQ(tx_->used_idx(), 2);
  EXPECT_EQ(device_->metrics().tx_invalid, 2u);
  EXPECT_TRUE(notifier_.broken.ok());
}

TEST_F(VsockDeviceTest, PendingRxPacketWaitsForBufferThenFillsIt) {
  RecordingBackend backend;
  Activate(&backend);
  VsockPacket p;
  p.hdr = GuestHeader(VsockOp::kRw, 2, 3);
  p.hdr.src_cid = kVsockHostCid;
  p.hdr.dst_cid = kGuestCid;
  p.payload = {'x', 'y'};
  backend.to_guest.push_back(p);
  ASSERT_TRUE(backend.rx_ready);
  backend.rx_ready();  // no rx buffers yet: nothing happens
  EXPECT_EQ(rx_->used_idx(), 0);
  auto chain = rx_->AddChain({}, {4096});
  device_->QueueNotify(VsockDevice::kRxQueue);
  ASSERT_EQ(rx_->used_idx(), 1);
  VsockPacket got = RxPacket(0, chain);
  EXPECT_EQ(got.hdr.op, VsockOp::kRw);
  EXPECT_EQ(got.hdr.len, 2u);
  EXPECT_EQ(got.payload, p.payload);
  EXPECT_EQ(notifier_.used[VsockDevice::kRxQueue], 1);
}

TEST_F(VsockDeviceTest, RxBufferTooSmallForPayloadIsKeptForLater) {
  RecordingBackend backend;
  Activate(&backend);
  VsockPacket p;
  p.hdr.op = VsockOp::kRw;
  p.payload.assign(100, 'z');
  backend.to_guest.push_back(p);
  rx_->AddChain({}, {kVsockHeaderSize + 10});
  device_->QueueNotify(VsockDevice::kRxQueue);
  EXPECT_EQ(rx_->used_idx(), 0);  // buffer given back to the ring (UndoPop)
  EXPECT_EQ(backend.to_guest.size(), 1u);
}

TEST_F(VsockDeviceTest, RxChainWithoutRoomForHeaderIsReturnedEmpty) {
  RecordingBackend backend;
  Activate(&backend);
  VsockPacket p;
  p.hdr.op = VsockOp::kRst;
  backend.to_guest.push_back(p);
  rx_->AddChain({}, {8});
  auto good = rx_->AddChain({}, {256});
  device_->QueueNotify(VsockDevice::kRxQueue);
  ASSERT_EQ(rx_->used_idx(), 2);
  EXPECT_EQ(rx_->used(0).len, 0u);
  EXPECT_EQ(RxPacket(1, good).hdr.op, VsockOp::kRst);
  EXPECT_EQ(device_->metrics().rx_bad_buffers, 1u);
}

TEST_F(VsockDeviceTest, TransportResetGoesToEventQueueWhenBufferArrives) {
  RecordingBackend backend;
  Activate(&backend);
  device_->SendTransportReset();
  EXPECT_EQ(backend.resets, 1);
  EXPECT_EQ(ev_->used_idx(), 0);
  auto chain = ev_->AddChain({}, {8});
  device_->QueueNotify(VsockDevice::kEventQueue);
  ASSERT_EQ(ev_->used_idx(), 1);
  EXPECT_EQ(ev_->used(0).len, 4u);
  std::vector<uint8_t> ev = ev_->ReadBytes(chain.writable[0].gpa, 4);
  EXPECT_EQ(ev, (std::vector<uint8_t>{0, 0, 0, 0}));  // VIRTIO_VSOCK_EVENT_TRANSPORT_RESET
  device_->QueueNotify(VsockDevice::kEventQueue);
  EXPECT_EQ(ev_->used_idx(), 1);  // one event only
}

TEST_F(VsockDeviceTest, ResetDropsConnectionsAndDetachesFromBackend) {
  RecordingBackend backend;
  Activate(&backend);
  device_->Reset();
  EXPECT_EQ(backend.resets, 1);
  EXPECT_FALSE(backend.rx_ready);
  tx_->AddChain({Bytes(GuestHeader(VsockOp::kRequest, 1, 2))}, {});
  device_->QueueNotify(VsockDevice::kTxQueue);  // inactive: ignored
  EXPECT_TRUE(backend.received.empty());
}

TEST_F(VsockDeviceTest, TxRingViolationStopsEveryQueueAndIsReportedOnce) {
  RecordingBackend backend;
  Activate(&backend);
  tx_->PushAvail(VsockDevice::kQueueSize);  // head index out of range
  device_->QueueNotify(VsockDevice::kTxQueue);
  EXPECT_EQ(notifier_.broken.code(), absl::StatusCode::kInvalidArgument);
  // Nothing moves any more, whichever queue or host event asks.
  VsockPacket p;
  p.hdr.op = VsockOp::kRst;
  backend.to_guest.push_back(p);
  auto chain = rx_->AddChain({}, {256});
  backend.rx_ready();
  device_->QueueNotify(VsockDevice::kRxQueue);
  device_->QueueNotify(VsockDevice::kTxQueue);
  ASSERT_TRUE(loop_->RunOnce(0).ok());
  EXPECT_EQ(rx_->used_idx(), 0);
  EXPECT_EQ(backend.to_guest.size(), 1u);
  EXPECT_EQ(notifier_.broken_reports, 1);
  // After a reset the device serves its queues again (the rx ring still
  // holds the buffer; the driver's new tx ring is empty).
  device_->Reset();
  queues_ = {rx_->MakeQueue(), virtio::Queue(VsockDevice::kQueueSize), ev_->MakeQueue()};
  Activate(&backend);
  device_->QueueNotify(VsockDevice::kRxQueue);
  ASSERT_EQ(rx_->used_idx(), 1);
  EXPECT_EQ(RxPacket(0, chain).hdr.op, VsockOp::kRst);
  EXPECT_EQ(notifier_.broken_reports, 1);
}

TEST_F(VsockDeviceTest, HostClientReachesGuestOverRingsWithUnixBackend) {
  char tmpl[] = "/tmp/dsec-vsock-dev-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  UnixVsockBackendOptions options;
  options.path = dir + "/vm.sock";
  options.guest_cid = kGuestCid;
  auto backend = std::move(UnixVsockBackend::Create(loop_.get(), options)).value();
  Activate(backend.get());
  std::vector<virtio::VirtQueueBuilder::AddedChain> rx_chains;
  for (int i = 0; i < 4; ++i) rx_chains.push_back(rx_->AddChain({}, {4096}));

  ScopedFd client(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, options.path.data(), options.path.size());
  ASSERT_EQ(::connect(client.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string hello = "CONNECT 52\nhello";
  ASSERT_EQ(::write(client.get(), hello.data(), hello.size()), static_cast<ssize_t>(hello.size()));

  // The loop accepts the client; the backend's rx callback fills a buffer.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (rx_->used_idx() < 1 && std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(loop_->RunOnce(20).ok());
  }
  ASSERT_EQ(rx_->used_idx(), 1);
  VsockPacket req = RxPacket(0, rx_chains[0]);
  ASSERT_EQ(req.hdr.op, VsockOp::kRequest);
  EXPECT_EQ(req.hdr.dst_cid, kGuestCid);
  EXPECT_EQ(req.hdr.dst_port, 52u);

  // The guest accepts; the RESPONSE releases the client's "hello".
  tx_->AddChain({Bytes(GuestHeader(VsockOp::kResponse, 52, req.hdr.src_port))}, {});
  device_->QueueNotify(VsockDevice::kTxQueue);
  ASSERT_EQ(rx_->used_idx(), 2);
  VsockPacket data = RxPacket(1, rx_chains[1]);
  EXPECT_EQ(data.hdr.op, VsockOp::kRw);
  EXPECT_EQ(std::string(data.payload.begin(), data.payload.end()), "hello");

  const std::string ok = "OK " + std::to_string(req.hdr.src_port) + "\n";
  std::string line(ok.size(), '\0');
  ASSERT_EQ(::read(client.get(), line.data(), line.size()), static_cast<ssize_t>(ok.size()));
  EXPECT_EQ(line, ok);

  VsockHeader reply = GuestHeader(VsockOp::kRw, 52, req.hdr.src_port, 5);
  tx_->AddChain({Bytes(reply, "world")}, {});
  device_->QueueNotify(VsockDevice::kTxQueue);
  std::string got(5, '\0');
  ASSERT_EQ(::read(client.get(), got.data(), got.size()), 5);
  EXPECT_EQ(got, "world");

  device_->Reset();
  backend.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dsec::devices
