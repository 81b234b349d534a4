// SPDX-License-Identifier: Apache-2.0
#include "devices/balloon/balloon_device.h"

#include <cstring>
#include <memory>
#include <vector>

#include "devices/balloon/fake_balloon_backend.h"
#include "devices/virtio/virtqueue_builder.h"
#include "gtest/gtest.h"
#include "base/event_loop.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::devices {
namespace {

constexpr uint64_t kRamBytes = 4 << 20;
constexpr uint64_t kPmemGpa = 0x40000000;  // in guest memory, not releasable

class FakeNotifier : public virtio::DriverNotifier {
 public:
  void SignalUsed(uint16_t q) override { used.push_back(q); }
  void SignalConfigChanged() override { ++config_changed; }
  void ReportBroken(const absl::Status& reason) override { broken.push_back(reason); }
  std::vector<uint16_t> used;
  int config_changed = 0;
  std::vector<absl::Status> broken;
};

std::vector<uint8_t> PfnBytes(const std::vector<uint32_t>& pfns) {
  std::vector<uint8_t> out(pfns.size() * 4);
  std::memcpy(out.data(), pfns.data(), out.size());
  return out;
}

class BalloonDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mem_ = memory::FakeGuestMemory::Create({{0, kRamBytes}, {kPmemGpa, 1 << 20}}).value();
    loop_ = EventLoop::Create().value();
  }

  // Creates the device and activates it with `acked` device features; one
  // builder per queue the device offers.
  void Start(BalloonOptions options = {},
             uint64_t acked = kBalloonFeatureStatsVq | kBalloonFeatureReporting |
                              kBalloonFeatureDeflateOnOom) {
    options.queue_size = 16;
    options.clock = &clock_;
    auto backend = std::make_unique<FakeBalloonBackend>(std::vector<BalloonRange>{{0, kRamBytes}});
    backend_ = backend.get();
    device_ = BalloonDevice::Create(std::move(backend), options).value();
    for (uint16_t i = 0; i < device_->num_queues(); ++i) {
      vqs_.push_back(std::make_unique<virtio::VirtQueueBuilder>(*mem_, 0x100000 + i * 0x40000, 16));
      queues_.push_back(vqs_.back()->MakeQueue());
    }
    virtio::ActivateContext ctx;
    ctx.acked_features = virtio::kFeatureVersion1 | acked;
    ctx.memory = mem_.get();
    ctx.queues = std::span<virtio::Queue>(queues_);
    ctx.notifier = &notifier_;
    ctx.loop = loop_.get();
    ASSERT_TRUE(device_->Activate(ctx).ok());
  }

  void Inflate(const std::vector<uint32_t>& pfns) {
    vqs_[0]->AddChain({PfnBytes(pfns)}, {});
    device_->QueueNotify(0);
  }
  void Deflate(const std::vector<uint32_t>& pfns) {
    vqs_[1]->AddChain({PfnBytes(pfns)}, {});
    device_->QueueNotify(1);
  }
  // Adds a reporting chain whose writable buffers are `ranges` (as Linux
  // does: the buffers are the free pages themselves).
  void Report(uint16_t q, const std::vector<BalloonRange>& ranges) {
    std::vector<virtio::VirtqDesc> descs;
    for (size_t i = 0; i < ranges.size(); ++i) {
      const uint16_t flags = static_cast<uint16_t>(
          virtio::kDescFlagWrite | (i + 1 < ranges.size() ? virtio::kDescFlagNext : 0));
      vqs_[q]->SetDesc(static_cast<uint16_t>(i), {ranges[i].gpa, static_cast<uint32_t>(ranges[i].size),
                                                  flags, static_cast<uint16_t>(i + 1)});
    }
    vqs_[q]->PushAvail(0);
    device_->QueueNotify(q);
  }

  std::unique_ptr<memory::FakeGuestMemory> mem_;
  std::unique_ptr<EventLoop> loop_;
  std::vector<std::unique_ptr<virtio::VirtQueueBuilder>> vqs_;
  std::vector<virtio::Queue> queues_;
  FakeClock clock_{1'000'000'000};
  FakeNotifier notifier_;
  FakeBalloonBackend* backend_ = nullptr;
  std::shared_ptr<BalloonDevice> device_;
};

TEST_F(BalloonDeviceTest, OffersBalloonFeaturesAndQueues) {
  Start();
  EXPECT_EQ(device_->device_type(), virtio::DeviceType::kBalloon);
  const uint64_t f = device_->device_features();
  EXPECT_TRUE(f & kBalloonFeatureStatsVq);
  EXPECT_TRUE(f & kBalloonFeatureDeflateOnOom);
  EXPECT_TRUE(f & kBalloonFeatureReporting);
  EXPECT_FALSE(f & kBalloonFeatureMustTellHost);
  EXPECT_FALSE(f & kBalloonFeatureFreePageHint);
  EXPECT_EQ(device_->num_queues(), 4);
  EXPECT_EQ(device_->ram_pages(), kRamBytes / 4096);
}

TEST_F(BalloonDeviceTest, TargetGoesToConfigAndNotifiesDriver) {
  Start();
  device_->SetTargetPages(100);
  EXPECT_EQ(notifier_.config_changed, 1);
  uint8_t buf[8];
  device_->ReadConfig(0, buf);
  uint32_t num_pages, actual;
  std::memcpy(&num_pages, buf, 4);
  std::memcpy(&actual, buf + 4, 4);
  EXPECT_EQ(num_pages, 100u);
  EXPECT_EQ(actual, 0u);
  device_->SetTargetPages(100);  // unchanged: no notification
  EXPECT_EQ(notifier_.config_changed, 1);
  device_->SetTargetPages(1u << 30);  // capped at RAM
  EXPECT_EQ(device_->target_pages(), kRamBytes / 4096);
}

TEST_F(BalloonDeviceTest, DriverWritesActualOnly) {
  Start();
  device_->SetTargetPages(7);
  const uint8_t bad[4] = {0xff, 0xff, 0xff, 0xff};
  device_->WriteConfig(0, bad);  // num_pages is read-only for the driver
  EXPECT_EQ(device_->target_pages(), 7u);
  const uint8_t actual[4] = {0x34, 0x12, 0, 0};
  device_->WriteConfig(4, actual);
  EXPECT_EQ(device_->actual_pages(), 0x1234u);
  const uint8_t hi = 0x01;
  device_->WriteConfig(6, std::span<const uint8_t>(&hi, 1));  // byte write
  EXPECT_EQ(device_->actual_pages(), 0x11234u);
  device_->WriteConfig(100, actual);  // beyond the struct: ignored
  uint8_t out[4] = {1, 1, 1, 1};
  device_->ReadConfig(8, out);  // beyond the struct reads as zero
  EXPECT_EQ(out[0] | out[1] | out[2] | out[3], 0);
}

TEST_F(BalloonDeviceTest, InflateReleasesCoalescedRunsOfRam) {
  Start();
  Inflate({0x12, 0x10, 0x11, 0x20});
  ASSERT_EQ(vqs_[0]->used_idx(), 1);
  EXPECT_EQ(vqs_[0]->used(0).len, 0u);
  ASSERT_EQ(backend_->releases().size(), 2u);
  EXPECT_EQ(backend_->releases()[0].gpa, 0x10000u);
  EXPECT_EQ(backend_->releases()[0].size, 3 * 4096u);
  EXPECT_EQ(backend_->releases()[1].gpa, 0x20000u);
  EXPECT_EQ(device_->balloon_pages(), 4u);
  BalloonMetrics m = device_->metrics();
  EXPECT_EQ(m.inflated_pages, 4u);
  EXPECT_EQ(m.released_bytes, 4 * 4096u);
  EXPECT_EQ(m.refused_total(), 0u);
  EXPECT_EQ(notifier_.used, std::vector<uint16_t>{0});
}

TEST_F(BalloonDeviceTest, RefusesPfnOutsideRamInsidePmemAndInflatedTwice) {
  Start();
  Inflate({0x10});
  const uint32_t hole = static_cast<uint32_t>((kRamBytes + 0x100000) >> 12);
  const uint32_t pmem = static_cast<uint32_t>(kPmemGpa >> 12) + 3;
  Inflate({hole, pmem, 0x10, 0xffffffff, 0x11, 0x11});
  // Only 0x11 is new RAM: one release of one page after the first.
  ASSERT_EQ(backend_->releases().size(), 2u);
  EXPECT_EQ(backend_->releases()[1].gpa, 0x11000u);
  EXPECT_EQ(backend_->releases()[1].size, 4096u);
  BalloonMetrics m = device_->metrics();
  EXPECT_EQ(m.refused_not_ram, 2u);         // the hole and PFN 0xffffffff
  EXPECT_EQ(m.refused_not_releasable, 1u);  // the pmem window
  EXPECT_EQ(m.refused_duplicate, 2u);       // 0x10 again, 0x11 twice in one buffer
  EXPECT_EQ(device_->balloon_pages(), 2u);
  EXPECT_TRUE(notifier_.broken.empty());
}

TEST_F(BalloonDeviceTest, DeflateNeedsNoHostWorkAndRefusesUnknownPages) {
  Start();
  device_->SetTargetPages(3);
  Inflate({1, 2, 3});
  const size_t releases = backend_->releases().size();
  device_->SetTargetPages(1);
  Deflate({1, 2, 9});
  EXPECT_EQ(backend_->releases().size(), releases);
  EXPECT_EQ(device_->balloon_pages(), 1u);
  BalloonMetrics m = device_->metrics();
  EXPECT_EQ(m.deflated_pages, 2u);
  EXPECT_EQ(m.refused_not_inflated, 1u);
  EXPECT_EQ(m.deflated_unrequested_pages, 0u);
  Deflate({3});  // below the target now: the guest deflated on its own (OOM)
  EXPECT_EQ(device_->metrics().deflated_unrequested_pages, 1u);
  Inflate({1});  // a deflated page may be inflated again
  EXPECT_EQ(device_->balloon_pages(), 1u);
}

TEST_F(BalloonDeviceTest, InflateFloodIsThrottledByPageBudget) {
  BalloonOptions o;
  o.release_pages_per_sec = 8;
  o.release_burst_pages = 8;
  o.max_pfns_per_request = 8;
  Start(o);
  Inflate({1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(vqs_[0]->used_idx(), 1);
  Inflate({9, 10, 11, 12});
  EXPECT_EQ(vqs_[0]->used_idx(), 1);  // over budget: waits in the ring
  EXPECT_EQ(device_->metrics().throttled, 1u);
  device_->QueueNotify(0);  // more kicks cannot make it sooner
  EXPECT_EQ(device_->metrics().throttled, 1u);
  clock_.AdvanceNs(1'000'000'000);
  // The retry timer runs on the loop (real time, min_retry_ns); wait on it.
  while (vqs_[0]->used_idx() < 2) ASSERT_TRUE(loop_->RunOnce(1000).ok());
  EXPECT_EQ(device_->balloon_pages(), 12u);
}

TEST_F(BalloonDeviceTest, ReportingReleasesRangesAndRefusesBadOnes) {
  Start();
  Inflate({0x50});
  backend_->releases();
  const size_t before = backend_->releases().size();
  Report(3, {{0x60000, 0x4000},      // good: 4 pages
             {0x62000, 0x4000},      // overlaps the first by 2 pages
             {0x50000, 0x1000},      // in the balloon
             {0x70800, 0x1000},      // unaligned
             {kPmemGpa, 0x2000}});   // pmem
  ASSERT_EQ(vqs_[3]->used_idx(), 1);
  ASSERT_EQ(backend_->releases().size(), before + 1);
  EXPECT_EQ(backend_->releases().back().gpa, 0x60000u);
  EXPECT_EQ(backend_->releases().back().size, 6 * 4096u);
  BalloonMetrics m = device_->metrics();
  EXPECT_EQ(m.reported_pages, 6u);
  EXPECT_EQ(m.reported_released_bytes, 6 * 4096u);
  EXPECT_EQ(m.refused_duplicate, 3u);  // 2 overlapping + 1 inflated
  EXPECT_EQ(m.refused_unaligned, 1u);
  EXPECT_EQ(m.refused_not_releasable, 2u);
  EXPECT_EQ(device_->balloon_pages(), 1u);  // reported pages stay the guest's
}

TEST_F(BalloonDeviceTest, ReportingOverBudgetIsRefusedNotReleased) {
  BalloonOptions o;
  o.release_pages_per_sec = 8;
  o.release_burst_pages = 8;
  o.max_pfns_per_request = 8;
  Start(o);
  Report(3, {{0x60000, 0x10000}});  // 16 pages > budget
  EXPECT_EQ(vqs_[3]->used_idx(), 1);  // acknowledged...
  EXPECT_TRUE(backend_->releases().empty());  // ...but nothing released
  EXPECT_EQ(device_->metrics().refused_rate, 16u);
}

TEST_F(BalloonDeviceTest, StatsBufferIsHeldAndReturnedOnRequest) {
  Start();
  EXPECT_TRUE(device_->stats_enabled());
  EXPECT_FALSE(device_->GetStats().has_value());
  std::vector<BalloonStatEntry> entries = {
      {static_cast<uint16_t>(BalloonStatTag::kFreeMemory), 1 << 20},
      {static_cast<uint16_t>(BalloonStatTag::kTotalMemory), 4 << 20}};
  std::vector<uint8_t> bytes(entries.size() * sizeof(BalloonStatEntry));
  std::memcpy(bytes.data(), entries.data(), bytes.size());
  auto chain = vqs_[2]->AddChain({bytes}, {});
  device_->QueueNotify(2);
  EXPECT_EQ(vqs_[2]->used_idx(), 0);  // held
  auto sample = device_->GetStats();
  ASSERT_TRUE(sample.has_value());
  EXPECT_EQ(sample->sequence, 1u);
  EXPECT_EQ(sample->received_ns, clock_.NowNs());
  EXPECT_EQ(sample->stats.Get(BalloonStatTag::kFreeMemory), 1u << 20);
  device_->RequestStats();
  while (vqs_[2]->used_idx() < 1) ASSERT_TRUE(loop_->RunOnce(1000).ok());
  EXPECT_EQ(vqs_[2]->used(0).id, chain.head);
  EXPECT_EQ(device_->metrics().stats_requests, 1u);
  vqs_[2]->AddChain({bytes}, {});
  device_->QueueNotify(2);
  EXPECT_EQ(device_->GetStats()->sequence, 2u);
}

TEST_F(BalloonDeviceTest, QueueNumbersAreCompactedOverAckedFeatures) {
  Start({}, kBalloonFeatureReporting);  // no stats queue: reporting is queue 2
  EXPECT_FALSE(device_->stats_enabled());
  Report(2, {{0x60000, 0x1000}});
  EXPECT_EQ(device_->metrics().reported_pages, 1u);
  device_->RequestStats();  // harmless without a stats queue
  EXPECT_EQ(device_->metrics().stats_requests, 0u);
}

TEST_F(BalloonDeviceTest, MalformedBufferIsCompletedEmpty) {
  Start();
  vqs_[0]->AddChain({{1, 2, 3}}, {});  // not a le32 array
  vqs_[0]->AddChain({PfnBytes({5})}, {16});  // device-writable part
  device_->QueueNotify(0);
  EXPECT_EQ(vqs_[0]->used_idx(), 2);
  EXPECT_EQ(device_->metrics().bad_requests, 2u);
  EXPECT_TRUE(backend_->releases().empty());
  EXPECT_TRUE(notifier_.broken.empty());
}

TEST_F(BalloonDeviceTest, RingViolationReportsBroken) {
  Start();
  vqs_[0]->PushAvail(99);
  device_->QueueNotify(0);
  ASSERT_EQ(notifier_.broken.size(), 1u);
  EXPECT_TRUE(backend_->releases().empty());
}

TEST_F(BalloonDeviceTest, ReleaseFailureIsCountedNotFatal) {
  Start();
  backend_->set_result(absl::InternalError("fallocate: EIO"));
  Inflate({1});
  EXPECT_EQ(device_->metrics().release_errors, 1u);
  EXPECT_EQ(device_->balloon_pages(), 1u);
  EXPECT_TRUE(notifier_.broken.empty());
}

TEST_F(BalloonDeviceTest, ResetEmptiesBalloonAndStopsNotifications) {
  Start();
  Inflate({1, 2});
  device_->Reset();
  EXPECT_EQ(device_->balloon_pages(), 0u);
  EXPECT_FALSE(device_->driver_active());
  device_->SetTargetPages(5);  // no driver: stored, not signalled
  EXPECT_EQ(notifier_.config_changed, 0);
  EXPECT_EQ(device_->target_pages(), 5u);
}

TEST(BalloonDeviceCreateTest, RejectsBadConfiguration) {
  auto make = [] {
    return std::make_unique<FakeBalloonBackend>(std::vector<BalloonRange>{{0, 1 << 20}});
  };
  EXPECT_FALSE(BalloonDevice::Create(nullptr, {}).ok());
  EXPECT_FALSE(BalloonDevice::Create(std::make_unique<FakeBalloonBackend>(
                                         std::vector<BalloonRange>{}), {}).ok());
  BalloonOptions o;
  o.queue_size = 3;
  EXPECT_FALSE(BalloonDevice::Create(make(), o).ok());
  o = {};
  o.release_pages_per_sec = 10;
  o.max_pfns_per_request = 256;
  EXPECT_FALSE(BalloonDevice::Create(make(), o).ok());
}

}  // namespace
}  // namespace dsec::devices
