// SPDX-License-Identifier: Apache-2.0
#include "devices/blk/blk_device.h"

#include <linux/virtio_blk.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "devices/blk/blk_test_util.h"
#include "devices/virtio/queue.h"
#include "devices/virtio/virtqueue_builder.h"
#include "gtest/gtest.h"
#include "base/clock.h"
#include "base/event_loop.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::devices {
namespace {

using testing::RunUntil;
using testing::TempImage;

static_assert(offsetof(BlkConfigSpace, seg_max) == offsetof(virtio_blk_config, seg_max));
static_assert(offsetof(BlkConfigSpace, blk_size) == offsetof(virtio_blk_config, blk_size));
static_assert(offsetof(BlkConfigSpace, num_queues) == offsetof(virtio_blk_config, num_queues));
static_assert(offsetof(BlkConfigSpace, max_discard_sectors) ==
              offsetof(virtio_blk_config, max_discard_sectors));
static_assert(offsetof(BlkConfigSpace, max_write_zeroes_seg) ==
              offsetof(virtio_blk_config, max_write_zeroes_seg));
static_assert(offsetof(BlkConfigSpace, write_zeroes_may_unmap) ==
              offsetof(virtio_blk_config, write_zeroes_may_unmap));
static_assert(kBlkFeatureDiscard == 1ull << VIRTIO_BLK_F_DISCARD);
static_assert(kBlkFeatureWriteZeroes == 1ull << VIRTIO_BLK_F_WRITE_ZEROES);
static_assert(kBlkFeatureFlush == 1ull << VIRTIO_BLK_F_FLUSH);
static_assert(kBlkFeatureRo == 1ull << VIRTIO_BLK_F_RO);

constexpr uint64_t kImageSize = 1 << 20;  // 2048 sectors
constexpr uint16_t kQueueSize = 16;

class FakeNotifier : public virtio::DriverNotifier {
 public:
  void SignalUsed(uint16_t) override { ++signals; }
  void SignalConfigChanged() override {}
  void ReportBroken(const absl::Status& reason) override { broken = reason; }
  int signals = 0;
  absl::Status broken;
};

std::vector<uint8_t> Header(uint32_t type, uint64_t sector) {
  BlkRequestHeader h{type, 0, sector};
  std::vector<uint8_t> out(sizeof(h));
  std::memcpy(out.data(), &h, sizeof(h));
  return out;
}

std::vector<uint8_t> Segment(uint64_t sector, uint32_t num, uint32_t flags) {
  BlkSegmentWire s{sector, num, flags};
  std::vector<uint8_t> out(sizeof(s));
  std::memcpy(out.data(), &s, sizeof(s));
  return out;
}

// Byte i of the image is the low byte of its sector number plus one.
uint8_t Pattern(uint64_t offset) { return static_cast<uint8_t>(offset / 512 + 1); }

class BlkDeviceTest : public ::testing::TestWithParam<BlkBackendKind> {
 protected:
  void SetUp() override {
    image_ = std::make_unique<TempImage>(kImageSize);
    {
      std::vector<uint8_t> bytes(kImageSize);
      for (uint64_t i = 0; i < kImageSize; ++i) bytes[i] = Pattern(i);
      ScopedFd fd(::open(image_->path().c_str(), O_WRONLY | O_CLOEXEC));
      ASSERT_EQ(::pwrite(fd.get(), bytes.data(), bytes.size(), 0),
                static_cast<ssize_t>(bytes.size()));
    }
    memory_ = memory::FakeGuestMemory::Create({{0, 4 << 20}}).value();
    loop_ = EventLoop::Create().value();
    config_.serial = "dsec-disk-0";
    config_.queue_size = kQueueSize;
    config_.backend = GetParam();
    config_.clock = &clock_;
  }

  void TearDown() override {
    if (device_) device_->Reset();
  }

  // Creates and activates the device over a fresh queue.
  void Start(bool read_only = false, uint64_t acked = kBlkFeatureFlush | kBlkFeatureDiscard |
                                                     kBlkFeatureWriteZeroes) {
    absl::StatusOr<DiskImage> disk = DiskImage::Open(image_->path(), read_only);
    ASSERT_TRUE(disk.ok()) << disk.status();
    absl::StatusOr<std::unique_ptr<BlkDevice>> device = BlkDevice::Create(std::move(*disk), config_);
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = std::move(*device);
    Activate(acked);
  }
  void Activate(uint64_t acked) {
    vq_ = std::make_unique<virtio::VirtQueueBuilder>(*memory_, 0x10000, kQueueSize, 2 << 20);
    queues_.clear();
    queues_.push_back(vq_->MakeQueue());
    virtio::ActivateContext ctx;
    ctx.acked_features = acked | virtio::kFeatureVersion1;
    ctx.memory = memory_.get();
    ctx.queues = queues_;
    ctx.notifier = &notifier_;
    ctx.loop = loop_.get();
    absl::Status s = device_->Activate(ctx);
    if (!s.ok() && GetParam() == BlkBackendKind::kIoUring) {
      GTEST_SKIP() << "io_uring unavailable on this host: " << s;
    }
    ASSERT_TRUE(s.ok()) << s;
  }

  // Kicks the queue and runs the loop until `n` chains are used.
  bool KickAndWait(uint16_t n) {
    device_->QueueNotify(0);
    return RunUntil(*loop_, [&] { return vq_->used_idx() >= n; });
  }
  uint8_t StatusOf(const virtio::VirtQueueBuilder::AddedChain& chain) {
    const virtio::GuestBuffer& last = chain.writable.back();
    return vq_->ReadBytes(last.gpa + last.len - 1, 1)[0];
  }

  std::unique_ptr<TempImage> image_;
  std::unique_ptr<memory::FakeGuestMemory> memory_;
  std::unique_ptr<EventLoop> loop_;
  FakeClock clock_{1'000'000'000};
  BlkDeviceConfig config_;
  FakeNotifier notifier_;
  std::unique_ptr<virtio::VirtQueueBuilder> vq_;
  std::vector<virtio::Queue> queues_;
  std::unique_ptr<BlkDevice> device_;
};

TEST_P(BlkDeviceTest, OffersFeaturesAndConfigSpaceForWritableImage) {
  Start();
  const uint64_t f = device_->device_features();
  EXPECT_EQ(device_->device_type(), virtio::DeviceType::kBlock);
  EXPECT_TRUE(f & kBlkFeatureFlush);
  EXPECT_TRUE(f & kBlkFeatureSegMax);
  EXPECT_TRUE(f & kBlkFeatureBlkSize);
  EXPECT_TRUE(f & kBlkFeatureDiscard);
  EXPECT_TRUE(f & kBlkFeatureWriteZeroes);
  EXPECT_FALSE(f & kBlkFeatureRo);

  uint8_t capacity[8];
  device_->ReadConfig(0, capacity);
  uint64_t value;
  std::memcpy(&value, capacity, 8);
  EXPECT_EQ(value, kImageSize / 512);
  uint8_t seg_max[4];
  device_->ReadConfig(offsetof(BlkConfigSpace, seg_max), seg_max);
  uint32_t seg;
  std::memcpy(&seg, seg_max, 4);
  EXPECT_EQ(seg, kQueueSize - 2u);
  EXPECT_EQ(device_->config_space().blk_size, 512u);
  EXPECT_EQ(device_->config_space().write_zeroes_may_unmap, 1u);
  uint8_t beyond[4] = {1, 1, 1, 1};
  device_->ReadConfig(58, beyond);  // straddles the end of the struct
  EXPECT_EQ(beyond[3], 0);
  device_->ReadConfig(~0ull - 1, beyond);
  EXPECT_EQ(beyond[0], 0);
}

TEST_P(BlkDeviceTest, ReadOnlyImageOffersRoAndRefusesWritesWithIoErr) {
  Start(/*read_only=*/true);
  EXPECT_TRUE(device_->device_features() & kBlkFeatureRo);
  EXPECT_FALSE(device_->device_features() & kBlkFeatureDiscard);
  auto write = vq_->AddChain({Header(kBlkTypeOut, 0), std::vector<uint8_t>(512, 0x77)}, {1});
  auto read = vq_->AddChain({Header(kBlkTypeIn, 0)}, {512, 1});
  ASSERT_TRUE(KickAndWait(2));
  EXPECT_EQ(StatusOf(write), kBlkStatusIoErr);
  EXPECT_EQ(StatusOf(read), kBlkStatusOk);
  EXPECT_EQ(image_->ReadAll()[0], Pattern(0));
  EXPECT_EQ(device_->metrics().errors, 1u);
}

TEST_P(BlkDeviceTest, ReadsSectorsThroughTheRing) {
  Start();
  auto chain = vq_->AddChain({Header(kBlkTypeIn, 2)}, {1024, 1});
  ASSERT_TRUE(KickAndWait(1));
  EXPECT_EQ(vq_->used(0).id, chain.head);
  EXPECT_EQ(vq_->used(0).len, 1025u);
  EXPECT_EQ(StatusOf(chain), kBlkStatusOk);
  std::vector<uint8_t> data = vq_->ReadBytes(chain.writable[0].gpa, 1024);
  for (uint64_t i = 0; i < 1024; ++i) ASSERT_EQ(data[i], Pattern(1024 + i)) << i;
  EXPECT_GE(notifier_.signals, 1);
  BlkMetrics m = device_->metrics();
  EXPECT_EQ(m.requests, 1u);
  EXPECT_EQ(m.read_requests, 1u);
  EXPECT_EQ(m.bytes_read, 1024u);
}

TEST_P(BlkDeviceTest, WritesSectorsThroughTheRing) {
  Start();
  auto chain = vq_->AddChain(
      {Header(kBlkTypeOut, 4), std::vector<uint8_t>(512, 0x5a), std::vector<uint8_t>(512, 0x6b)},
      {1});
  ASSERT_TRUE(KickAndWait(1));
  EXPECT_EQ(vq_->used(0).len, 1u);
  EXPECT_EQ(StatusOf(chain), kBlkStatusOk);
  std::vector<uint8_t> file = image_->ReadAll();
  EXPECT_EQ(file[4 * 512 - 1], Pattern(4 * 512 - 1));
  EXPECT_EQ(file[4 * 512], 0x5a);
  EXPECT_EQ(file[5 * 512], 0x6b);
  EXPECT_EQ(file[6 * 512], Pattern(6 * 512));
  EXPECT_EQ(device_->metrics().bytes_written, 1024u);
}

TEST_P(BlkDeviceTest, WritesWithoutNegotiatedFlushAreWriteThrough) {
  Start(/*read_only=*/false, /*acked=*/0);
  auto chain = vq_->AddChain({Header(kBlkTypeOut, 0), std::vector<uint8_t>(512, 0x11)}, {1});
  ASSERT_TRUE(KickAndWait(1));
  EXPECT_EQ(StatusOf(chain), kBlkStatusOk);
  EXPECT_EQ(image_->ReadAll()[0], 0x11);
}

TEST_P(BlkDeviceTest, RefusedRequestsGetIoErrOrUnsuppWithoutIo) {
  Start();
  auto beyond = vq_->AddChain({Header(kBlkTypeIn, 2047)}, {1024, 1});
  auto odd = vq_->AddChain({Header(kBlkTypeOut, 0), std::vector<uint8_t>(100, 1)}, {1});
  auto unknown = vq_->AddChain({Header(99, 0)}, {1});
  ASSERT_TRUE(KickAndWait(3));
  EXPECT_EQ(StatusOf(beyond), kBlkStatusIoErr);
  EXPECT_EQ(StatusOf(odd), kBlkStatusIoErr);
  EXPECT_EQ(StatusOf(unknown), kBlkStatusUnsupp);
  for (uint16_t i = 0; i < 3; ++i) EXPECT_EQ(vq_->used(i).len, 1u);
  EXPECT_EQ(image_->ReadAll()[0], Pattern(0));
  BlkMetrics m = device_->metrics();
  EXPECT_EQ(m.errors, 2u);
  EXPECT_EQ(m.unsupported, 1u);
}

TEST_P(BlkDeviceTest, ChainWithoutStatusByteIsReturnedWithZeroLength) {
  Start();
  vq_->AddChain({Header(kBlkTypeFlush, 0)}, {});
  ASSERT_TRUE(KickAndWait(1));
  EXPECT_EQ(vq_->used(0).len, 0u);
  EXPECT_EQ(device_->metrics().invalid_chains, 1u);
  EXPECT_TRUE(notifier_.broken.ok());
}

TEST_P(BlkDeviceTest, GetIdReturnsNulPaddedSerial) {
  Start();
  auto chain = vq_->AddChain({Header(kBlkTypeGetId, 0)}, {20, 1});
  ASSERT_TRUE(KickAndWait(1));
  EXPECT_EQ(StatusOf(chain), kBlkStatusOk);
  EXPECT_EQ(vq_->used(0).len, 21u);
  std::vector<uint8_t> id = vq_->ReadBytes(chain.writable[0].gpa, 20);
  std::string expected = "dsec-disk-0";
  expected.resize(20, '\0');
  EXPECT_EQ(std::string(id.begin(), id.end()), expected);
}

TEST_P(BlkDeviceTest, FlushDiscardAndWriteZeroesReachTheImage) {
  Start();
  auto flush = vq_->AddChain({Header(kBlkTypeFlush, 0)}, {1});
  std::vector<uint8_t> segs = Segment(8, 8, 0);
  std::vector<uint8_t> second = Segment(32, 1, 0);
  segs.insert(segs.end(), second.begin(), second.end());
  auto discard = vq_->AddChain({Header(kBlkTypeDiscard, 0), segs}, {1});
  auto zeroes =
      vq_->AddChain({Header(kBlkTypeWriteZeroes, 0), Segment(64, 3, kBlkSegmentFlagUnmap)}, {1});
  ASSERT_TRUE(KickAndWait(3));
  EXPECT_EQ(StatusOf(flush), kBlkStatusOk);
  EXPECT_EQ(StatusOf(discard), kBlkStatusOk);
  EXPECT_EQ(StatusOf(zeroes), kBlkStatusOk);
  std::vector<uint8_t> file = image_->ReadAll();
  ASSERT_EQ(file.size(), kImageSize);
  auto all_zero = [&](uint64_t from, uint64_t len) {
    for (uint64_t i = from; i < from + len; ++i)
      if (file[i] != 0) return false;
    return true;
  };
  EXPECT_TRUE(all_zero(8 * 512, 8 * 512));
  EXPECT_TRUE(all_zero(32 * 512, 512));
  EXPECT_TRUE(all_zero(64 * 512, 3 * 512));
  EXPECT_EQ(file[8 * 512 - 1], Pattern(8 * 512 - 1));
  EXPECT_EQ(file[16 * 512], Pattern(16 * 512));
  EXPECT_EQ(file[67 * 512], Pattern(67 * 512));
  BlkMetrics m = device_->metrics();
  EXPECT_EQ(m.flush_requests, 1u);
  EXPECT_EQ(m.discard_requests, 1u);
  EXPECT_EQ(m.write_zeroes_requests, 1u);
}

TEST_P(BlkDeviceTest, DiscardNotNegotiatedIsUnsupp) {
  Start(/*read_only=*/false, /*acked=*/kBlkFeatureFlush);
  auto discard = vq_->AddChain({Header(kBlkTypeDiscard, 0), Segment(0, 8, 0)}, {1});
  ASSERT_TRUE(KickAndWait(1));
  EXPECT_EQ(StatusOf(discard), kBlkStatusUnsupp);
  EXPECT_EQ(image_->ReadAll()[0], Pattern(0));
}

TEST_P(BlkDeviceTest, OpsLimiterDefersRequestsAndTimerResumesThem) {
  config_.rate_ops_per_second = 1000;  // one token per millisecond
  config_.burst_ops = 1;
  Start();
  auto first = vq_->AddChain({Header(kBlkTypeIn, 0)}, {512, 1});
  auto second = vq_->AddChain({Header(kBlkTypeIn, 1)}, {512, 1});
  device_->QueueNotify(0);
  // The second request went back to the ring: deferred, not dropped.
  EXPECT_EQ(device_->metrics().throttled, 1u);
  ASSERT_TRUE(RunUntil(*loop_, [&] { return vq_->used_idx() >= 1; }));
  EXPECT_EQ(vq_->used(0).id, first.head);
  // A kick does not bypass the limiter while the (fake) clock stands still.
  device_->QueueNotify(0);
  EXPECT_EQ(vq_->used_idx(), 1);
  EXPECT_EQ(device_->metrics().requests, 1u);
  // Time passes; the re-armed timer runs the queue again.
  clock_.AdvanceNs(1'000'000);
  ASSERT_TRUE(RunUntil(*loop_, [&] { return vq_->used_idx() >= 2; }));
  EXPECT_EQ(vq_->used(1).id, second.head);
  EXPECT_EQ(StatusOf(second), kBlkStatusOk);
  EXPECT_EQ(device_->metrics().requests, 2u);
}

TEST_P(BlkDeviceTest, BytesLimiterDefersUntilTokensRefill) {
  config_.rate_bytes_per_second = 1024;
  config_.burst_bytes = 1024;
  Start();
  vq_->AddChain({Header(kBlkTypeIn, 0)}, {1024, 1});
  vq_->AddChain({Header(kBlkTypeIn, 2)}, {1024, 1});
  ASSERT_TRUE(KickAndWait(1));
  EXPECT_GE(device_->metrics().throttled, 1u);
  EXPECT_EQ(vq_->used_idx(), 1);
  clock_.AdvanceNs(1'000'000'000);
  ASSERT_TRUE(KickAndWait(2));
  EXPECT_EQ(device_->metrics().bytes_read, 2048u);
}

TEST_P(BlkDeviceTest, RequestLargerThanByteBurstStillCompletes) {
  config_.rate_bytes_per_second = 512;
  config_.burst_bytes = 512;
  Start();
  auto big = vq_->AddChain({Header(kBlkTypeIn, 0)}, {4096, 1});
  ASSERT_TRUE(KickAndWait(1));
  EXPECT_EQ(StatusOf(big), kBlkStatusOk);
}

TEST_P(BlkDeviceTest, ResetAbandonsInFlightRequestsAndDeviceReactivates) {
  Start();
  vq_->AddChain({Header(kBlkTypeIn, 0)}, {65536, 1});
  device_->QueueNotify(0);
  device_->Reset();
  ASSERT_TRUE(loop_->RunOnce(0).ok());
  EXPECT_EQ(vq_->used_idx(), 0);
  Activate(kBlkFeatureFlush);
  auto chain = vq_->AddChain({Header(kBlkTypeIn, 0)}, {512, 1});
  ASSERT_TRUE(KickAndWait(1));
  EXPECT_EQ(StatusOf(chain), kBlkStatusOk);
}

TEST_P(BlkDeviceTest, RingViolationReportsBroken) {
  Start();
  vq_->SetDesc(0, virtio::VirtqDesc{0xffff'ffff'0000ull, 16, 0, 0});
  vq_->PushAvail(0);
  device_->QueueNotify(0);
  EXPECT_FALSE(notifier_.broken.ok());
  EXPECT_EQ(vq_->used_idx(), 0);
}

TEST_P(BlkDeviceTest, CompletionAfterARingViolationLeavesTheRingAlone) {
  Start();
  auto read = vq_->AddChain({Header(kBlkTypeIn, 0)}, {512, 1});
  const virtio::GuestBuffer& status = read.writable.back();
  vq_->WriteBytes(status.gpa, {0xee});  // not a status the device writes
  device_->QueueNotify(0);  // the read is in flight
  vq_->PushAvail(kQueueSize + 1);  // head index out of range
  device_->QueueNotify(0);
  ASSERT_FALSE(notifier_.broken.ok());
  // The read completes (counted) but the broken device returns nothing to
  // the ring the driver is about to reset, and says nothing more.
  ASSERT_TRUE(RunUntil(*loop_, [&] { return device_->metrics().bytes_read == 512; }));
  EXPECT_EQ(vq_->used_idx(), 0);
  EXPECT_EQ(StatusOf(read), 0xee);
  EXPECT_EQ(notifier_.signals, 0);
}

TEST_P(BlkDeviceTest, ManyRequestsBeyondIoDepthAllComplete) {
  config_.io_depth = 2;
  Start();
  // Batches of 5 three-descriptor chains fit the 16-entry descriptor table.
  for (uint16_t batch = 0; batch < 2; ++batch) {
    std::vector<virtio::VirtQueueBuilder::AddedChain> chains;
    for (int i = 0; i < 5; ++i) {
      chains.push_back(vq_->AddChain({Header(kBlkTypeIn, batch * 5 + i)}, {512, 1}));
    }
    ASSERT_TRUE(KickAndWait(static_cast<uint16_t>(5 * (batch + 1))));
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(StatusOf(chains[i]), kBlkStatusOk);
      EXPECT_EQ(vq_->ReadBytes(chains[i].writable[0].gpa, 1)[0], Pattern(512u * (batch * 5 + i)));
    }
  }
}

TEST(BlkDeviceCreateTest, RefusesSerialLongerThanTwentyBytes) {
  TempImage image(4096);
  BlkDeviceConfig config;
  config.serial = std::string(21, 'x');
  auto device = BlkDevice::Create(DiskImage::Open(image.path(), false).value(), config);
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Backends, BlkDeviceTest,
                         ::testing::Values(BlkBackendKind::kIoUring, BlkBackendKind::kSync),
                         [](const ::testing::TestParamInfo<BlkBackendKind>& info) {
                           return info.param == BlkBackendKind::kSync ? "Sync" : "IoUring";
                         });

}  // namespace
}  // namespace dsec::devices
