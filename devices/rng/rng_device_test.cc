// SPDX-License-Identifier: Apache-2.0
#include "devices/rng/rng_device.h"

#include <memory>

#include "platform/interrupt/fake_interrupt_line.h"
#include "devices/rng/fake_rng_backend.h"
#include "devices/virtio/mmio_transport.h"
#include "devices/virtio/virtqueue_builder.h"
#include "gtest/gtest.h"
#include "base/event_loop.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::devices {
namespace {

class FakeNotifier : public virtio::DriverNotifier {
 public:
  void SignalUsed(uint16_t) override { ++used; }
  void SignalConfigChanged() override {}
  void ReportBroken(const absl::Status& reason) override { broken.push_back(reason); }
  int used = 0;
  std::vector<absl::Status> broken;
};

class RngDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mem_ = memory::FakeGuestMemory::Create({{0, 1 << 20}}).value();
    loop_ = EventLoop::Create().value();
    vq_ = std::make_unique<virtio::VirtQueueBuilder>(*mem_, 0x10000, 16);
    queues_.push_back(vq_->MakeQueue());
  }

  void Start(RngOptions options) {
    options.queue_size = 16;
    options.clock = &clock_;
    auto source = std::make_unique<FakeEntropySource>();
    source_ = source.get();
    device_ = RngDevice::Create(std::move(source), options).value();
    virtio::ActivateContext ctx;
    ctx.acked_features = virtio::kFeatureVersion1;
    ctx.memory = mem_.get();
    ctx.queues = std::span<virtio::Queue>(queues_);
    ctx.notifier = &notifier_;
    ctx.loop = loop_.get();
    ASSERT_TRUE(device_->Activate(ctx).ok());
  }

  std::unique_ptr<memory::FakeGuestMemory> mem_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<virtio::VirtQueueBuilder> vq_;
  std::vector<virtio::Queue> queues_;
  FakeClock clock_{1'000'000'000};
  FakeNotifier notifier_;
  FakeEntropySource* source_ = nullptr;
  std::shared_ptr<RngDevice> device_;
};

TEST_F(RngDeviceTest, FillsWritableBuffersFromSource) {
  Start({});
  auto added = vq_->AddChain({}, {3, 5});
  device_->QueueNotify(0);
  ASSERT_EQ(vq_->used_idx(), 1);
  EXPECT_EQ(vq_->used(0).id, added.head);
  EXPECT_EQ(vq_->used(0).len, 8u);
  EXPECT_EQ(vq_->ReadBytes(added.writable[0].gpa, 3), (std::vector<uint8_t>{0, 1, 2}));
  EXPECT_EQ(vq_->ReadBytes(added.writable[1].gpa, 5), (std::vector<uint8_t>{3, 4, 5, 6, 7}));
  EXPECT_EQ(notifier_.used, 1);
  EXPECT_EQ(device_->metrics().bytes.load(), 8u);
}

TEST_F(RngDeviceTest, ServesSeveralChainsPerKickAndSignalsOnce) {
  Start({});
  for (int i = 0; i < 5; ++i) vq_->AddChain({}, {16});
  device_->QueueNotify(0);
  EXPECT_EQ(vq_->used_idx(), 5);
  EXPECT_EQ(notifier_.used, 1);
}

TEST_F(RngDeviceTest, CapsBytesPerRequest) {
  RngOptions o;
  o.max_bytes_per_request = 10;
  Start(o);
  vq_->AddChain({}, {100});
  device_->QueueNotify(0);
  EXPECT_EQ(vq_->used(0).len, 10u);
}

TEST_F(RngDeviceTest, CompletesMalformedRequestEmptyWithoutBreaking) {
  Start({});
  vq_->AddChain({{1, 2}}, {16});
  device_->QueueNotify(0);
  ASSERT_EQ(vq_->used_idx(), 1);
  EXPECT_EQ(vq_->used(0).len, 0u);
  EXPECT_TRUE(notifier_.broken.empty());
  EXPECT_EQ(device_->metrics().bad_requests.load(), 1u);
}

TEST_F(RngDeviceTest, HonoursRateLimitOnFakeClock) {
  RngOptions o;
  o.rate_bytes_per_sec = 100;
  o.burst_bytes = 100;
  Start(o);
  vq_->AddChain({}, {1000});
  device_->QueueNotify(0);
  ASSERT_EQ(vq_->used_idx(), 1);
  EXPECT_EQ(vq_->used(0).len, 100u);  // the burst
  vq_->AddChain({}, {1000});
  device_->QueueNotify(0);
  EXPECT_EQ(vq_->used_idx(), 1);  // bucket empty: deferred, not refused
  EXPECT_TRUE(device_->retry_pending());
  EXPECT_EQ(device_->metrics().throttled.load(), 1u);
  clock_.AdvanceNs(500'000'000);  // half a second: 50 bytes
  // The retry timer is armed for 10 ms of real time (1 byte at 100 B/s);
  // wait for it on the loop, not with a sleep.
  while (vq_->used_idx() < 2) ASSERT_TRUE(loop_->RunOnce(1000).ok());
  EXPECT_EQ(vq_->used(1).len, 50u);
  EXPECT_EQ(device_->metrics().bytes.load(), 150u);
}

TEST_F(RngDeviceTest, RetriesWhenSourceHasNoEntropy) {
  Start({});
  source_->set_result(absl::UnavailableError("EAGAIN"));
  vq_->AddChain({}, {8});
  device_->QueueNotify(0);
  EXPECT_EQ(vq_->used_idx(), 0);
  EXPECT_TRUE(device_->retry_pending());
  EXPECT_EQ(device_->metrics().source_unavailable.load(), 1u);
  source_->set_result(absl::OkStatus());
  while (vq_->used_idx() < 1) ASSERT_TRUE(loop_->RunOnce(1000).ok());
  EXPECT_EQ(vq_->used(0).len, 8u);
  EXPECT_TRUE(notifier_.broken.empty());
}

TEST_F(RngDeviceTest, BrokenSourceReportsBroken) {
  Start({});
  source_->set_result(absl::InternalError("getrandom: EIO"));
  vq_->AddChain({}, {8});
  device_->QueueNotify(0);
  EXPECT_EQ(notifier_.broken.size(), 1u);
  EXPECT_EQ(vq_->used_idx(), 0);
}

TEST_F(RngDeviceTest, RingViolationReportsBroken) {
  Start({});
  vq_->PushAvail(99);
  device_->QueueNotify(0);
  ASSERT_EQ(notifier_.broken.size(), 1u);
  EXPECT_EQ(notifier_.broken[0].code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RngDeviceTest, YieldsToLoopAfterABatchAndFinishesLater) {
  Start({});
  // 16 descriptors: keep refilling so more than one batch is pending.
  int added = 0;
  for (; added < 16; ++added) vq_->AddChain({}, {1});
  device_->QueueNotify(0);
  // All 16 fit in one batch of 64.
  EXPECT_EQ(vq_->used_idx(), 16);
}

TEST_F(RngDeviceTest, ResetCancelsPendingRetry) {
  Start({});
  source_->set_result(absl::UnavailableError("EAGAIN"));
  vq_->AddChain({}, {8});
  device_->QueueNotify(0);
  ASSERT_TRUE(device_->retry_pending());
  device_->Reset();
  EXPECT_FALSE(device_->retry_pending());
  ASSERT_TRUE(loop_->RunOnce(0).ok());
  EXPECT_EQ(source_->calls(), 1u);
}

TEST_F(RngDeviceTest, HasNoConfigSpace) {
  Start({});
  uint32_t v = 0xffffffff;
  device_->ReadConfig(0, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&v), 4));
  EXPECT_EQ(v, 0u);
}

TEST(RngDeviceCreateTest, RejectsBadOptions) {
  RngOptions o;
  o.queue_size = 100;
  EXPECT_FALSE(RngDevice::Create(std::make_unique<FakeEntropySource>(), o).ok());
  EXPECT_FALSE(RngDevice::Create(nullptr, RngOptions{}).ok());
}

TEST(GetrandomEntropySourceTest, FillsBuffer) {
  GetrandomEntropySource source;
  std::vector<uint8_t> buf(64, 0);
  auto n = source.Fill(buf);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_GT(*n, 0u);
}

// End to end through the virtio-mmio transport, as a guest driver would.
TEST(RngOverMmioTest, GuestDriverGetsRandomBytes) {
  auto mem = memory::FakeGuestMemory::Create({{0, 1 << 20}}).value();
  auto loop = EventLoop::Create().value();
  RngOptions o;
  o.queue_size = 16;
  auto device = RngDevice::Create(std::make_unique<GetrandomEntropySource>(), o).value();
  auto irq = std::make_shared<FakeInterruptLine>();
  virtio::MmioTransport::Options to;
  to.name = "rng0";
  to.device = device;
  to.memory = mem.get();
  to.interrupt = irq;
  to.loop = loop.get();
  auto t = virtio::MmioTransport::Create(std::move(to)).value();
  auto w = [&](uint64_t off, uint32_t v) {
    t->Write(off, std::span<const uint8_t>(reinterpret_cast<uint8_t*>(&v), 4));
  };
  virtio::VirtQueueBuilder vq(*mem, 0x10000, 16);
  w(virtio::mmio::kStatus, 1);
  w(virtio::mmio::kStatus, 3);
  w(virtio::mmio::kDriverFeaturesSel, 1);
  w(virtio::mmio::kDriverFeatures, 1);  // VERSION_1
  w(virtio::mmio::kStatus, 11);
  w(virtio::mmio::kQueueSel, 0);
  w(virtio::mmio::kQueueNum, 16);
  w(virtio::mmio::kQueueDescLow, static_cast<uint32_t>(vq.desc_addr()));
  w(virtio::mmio::kQueueDriverLow, static_cast<uint32_t>(vq.avail_addr()));
  w(virtio::mmio::kQueueDeviceLow, static_cast<uint32_t>(vq.used_addr()));
  w(virtio::mmio::kQueueReady, 1);
  w(virtio::mmio::kStatus, 15);
  auto added = vq.AddChain({}, {32});
  w(virtio::mmio::kQueueNotify, 0);
  while (vq.used_idx() < 1) ASSERT_TRUE(loop->RunOnce(1000).ok());
  EXPECT_EQ(vq.used(0).len, 32u);
  EXPECT_NE(vq.ReadBytes(added.writable[0].gpa, 32), std::vector<uint8_t>(32, 0));
  EXPECT_GE(irq->count(), 1u);
  EXPECT_EQ(t->status(), 15u);
}

}  // namespace
}  // namespace dsec::devices
