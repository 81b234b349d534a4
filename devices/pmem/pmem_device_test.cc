// SPDX-License-Identifier: Apache-2.0
#include "devices/pmem/pmem_device.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "devices/pmem/fake_pmem_backend.h"
#include "devices/pmem/pmem_request.h"
#include "devices/virtio/virtqueue_builder.h"
#include "gtest/gtest.h"
#include "base/event_loop.h"
#include "base/scoped_fd.h"
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

std::vector<uint8_t> Le32(uint32_t v) {
  return {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v >> 16),
          static_cast<uint8_t>(v >> 24)};
}

class PmemDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mem_ = memory::FakeGuestMemory::Create({{0, 1 << 20}}).value();
    loop_ = EventLoop::Create().value();
    vq_ = std::make_unique<virtio::VirtQueueBuilder>(*mem_, 0x10000, 16);
    queues_.push_back(vq_->MakeQueue());
  }

  void Start(PmemOptions options) {
    options.queue_size = 16;
    if (options.size == 0) options.size = 64 << 20;
    auto backend = std::make_unique<FakePmemBackend>();
    backend_ = backend.get();
    device_ = PmemDevice::Create(std::move(backend), options).value();
    virtio::ActivateContext ctx;
    ctx.acked_features = virtio::kFeatureVersion1;
    ctx.memory = mem_.get();
    ctx.queues = std::span<virtio::Queue>(queues_);
    ctx.notifier = &notifier_;
    ctx.loop = loop_.get();
    ASSERT_TRUE(device_->Activate(ctx).ok());
  }

  virtio::VirtQueueBuilder::AddedChain AddRequest(uint32_t type) {
    return vq_->AddChain({Le32(type)}, {4});
  }
  uint32_t Ret(const virtio::VirtQueueBuilder::AddedChain& c) {
    auto b = vq_->ReadBytes(c.writable[0].gpa, 4);
    return b[0] | b[1] << 8 | b[2] << 16 | static_cast<uint32_t>(b[3]) << 24;
  }
  void RunUntilUsed(uint16_t n) {
    while (vq_->used_idx() < n) ASSERT_TRUE(loop_->RunOnce(5000).ok());
  }

  std::unique_ptr<memory::FakeGuestMemory> mem_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<virtio::VirtQueueBuilder> vq_;
  std::vector<virtio::Queue> queues_;
  FakeNotifier notifier_;
  FakePmemBackend* backend_ = nullptr;
  std::shared_ptr<PmemDevice> device_;
};

TEST_F(PmemDeviceTest, ConfigSpaceHoldsStartAndSize) {
  PmemOptions o;
  o.start = 0x800'0000;
  o.size = 0x20'0000;
  Start(o);
  EXPECT_EQ(device_->device_type(), virtio::DeviceType::kPmem);
  EXPECT_EQ(static_cast<uint32_t>(device_->device_type()), 27u);
  uint64_t start = 0, size = 0;
  device_->ReadConfig(0, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&start), 8));
  device_->ReadConfig(8, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&size), 8));
  EXPECT_EQ(start, 0x800'0000u);
  EXPECT_EQ(size, 0x20'0000u);
  uint32_t junk = 0x12345678;
  device_->WriteConfig(0, std::span<const uint8_t>(reinterpret_cast<uint8_t*>(&junk), 4));
  device_->ReadConfig(0, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&start), 8));
  EXPECT_EQ(start, 0x800'0000u);
}

TEST_F(PmemDeviceTest, FlushRunsFdatasyncOffTheLoopAndCompletesOk) {
  Start({});
  auto c = AddRequest(kPmemReqTypeFlush);
  device_->QueueNotify(0);
  RunUntilUsed(1);
  EXPECT_EQ(vq_->used(0).id, c.head);
  EXPECT_EQ(vq_->used(0).len, 4u);
  EXPECT_EQ(Ret(c), kPmemRespOk);
  EXPECT_EQ(backend_->flushes(), 1);
  EXPECT_EQ(device_->metrics().syncs.load(), 1u);
  EXPECT_GE(notifier_.used, 1);
}

TEST_F(PmemDeviceTest, CoalescesFlushesThatArriveDuringASync) {
  PmemOptions o;
  o.flush_min_interval_ns = 0;
  Start(o);
  backend_->set_hold(true);
  auto first = AddRequest(kPmemReqTypeFlush);
  device_->QueueNotify(0);
  backend_->AwaitStarted(1);
  std::vector<virtio::VirtQueueBuilder::AddedChain> later;
  for (int i = 0; i < 3; ++i) later.push_back(AddRequest(kPmemReqTypeFlush));
  device_->QueueNotify(0);
  EXPECT_EQ(device_->pending_flushes(), 4u);
  EXPECT_EQ(vq_->used_idx(), 0);
  backend_->set_hold(false);
  RunUntilUsed(4);
  EXPECT_EQ(backend_->flushes(), 2);  // one for the first, one for the three
  EXPECT_EQ(device_->metrics().flush_requests.load(), 4u);
  for (const auto& c : later) EXPECT_EQ(Ret(c), kPmemRespOk);
  EXPECT_EQ(Ret(first), kPmemRespOk);
}

TEST_F(PmemDeviceTest, RateLimitsSyncsToTheMinimumInterval) {
  FakeClock clock(1'000'000'000);
  PmemOptions o;
  o.clock = &clock;
  o.flush_min_interval_ns = 20'000'000;
  Start(o);
  AddRequest(kPmemReqTypeFlush);
  device_->QueueNotify(0);
  RunUntilUsed(1);
  AddRequest(kPmemReqTypeFlush);
  device_->QueueNotify(0);
  // The fake clock stands still: the second sync waits for the delay timer.
  ASSERT_TRUE(loop_->RunOnce(0).ok());
  EXPECT_EQ(vq_->used_idx(), 1);
  EXPECT_EQ(backend_->flushes(), 1);
  clock.AdvanceNs(20'000'000);
  RunUntilUsed(2);
  EXPECT_EQ(backend_->flushes(), 2);
}

TEST_F(PmemDeviceTest, ReadOnlyFlushSucceedsWithoutSync) {
  PmemOptions o;
  o.read_only = true;
  Start(o);
  auto c = AddRequest(kPmemReqTypeFlush);
  device_->QueueNotify(0);
  ASSERT_EQ(vq_->used_idx(), 1);
  EXPECT_EQ(Ret(c), kPmemRespOk);
  EXPECT_EQ(backend_->flushes(), 0);
}

TEST_F(PmemDeviceTest, UnknownRequestTypeGetsErrorStatus) {
  Start({});
  auto c = AddRequest(5);
  device_->QueueNotify(0);
  ASSERT_EQ(vq_->used_idx(), 1);
  EXPECT_EQ(Ret(c), kPmemRespError);
  EXPECT_EQ(device_->metrics().unknown_requests.load(), 1u);
  EXPECT_TRUE(notifier_.broken.empty());
}

TEST_F(PmemDeviceTest, MalformedRequestCompletedEmpty) {
  Start({});
  vq_->AddChain({{0, 0}}, {4});
  device_->QueueNotify(0);
  ASSERT_EQ(vq_->used_idx(), 1);
  EXPECT_EQ(vq_->used(0).len, 0u);
  EXPECT_EQ(device_->metrics().bad_requests.load(), 1u);
}

TEST_F(PmemDeviceTest, FailedSyncAnswersError) {
  Start({});
  backend_->set_flush_result(absl::InternalError("fdatasync: EIO"));
  auto c = AddRequest(kPmemReqTypeFlush);
  device_->QueueNotify(0);
  RunUntilUsed(1);
  EXPECT_EQ(Ret(c), kPmemRespError);
  EXPECT_EQ(device_->metrics().flush_errors.load(), 1u);
}

TEST_F(PmemDeviceTest, SizeChangeAtFlushMarksDeviceBroken) {
  Start({});
  backend_->set_size_result(absl::FailedPreconditionError("changed size"));
  auto c = AddRequest(kPmemReqTypeFlush);
  device_->QueueNotify(0);
  RunUntilUsed(1);
  EXPECT_EQ(Ret(c), kPmemRespError);
  ASSERT_EQ(notifier_.broken.size(), 1u);
  EXPECT_EQ(device_->metrics().size_changes.load(), 1u);
}

TEST_F(PmemDeviceTest, PeriodicSizeCheckMarksDeviceBroken) {
  PmemOptions o;
  o.size_check_interval_ns = 1'000'000;
  Start(o);
  backend_->set_size_result(absl::FailedPreconditionError("changed size"));
  while (notifier_.broken.empty()) ASSERT_TRUE(loop_->RunOnce(1000).ok());
  EXPECT_EQ(device_->metrics().size_changes.load(), 1u);
}

TEST_F(PmemDeviceTest, ResetDropsFlushInFlight) {
  Start({});
  backend_->set_hold(true);
  AddRequest(kPmemReqTypeFlush);
  device_->QueueNotify(0);
  backend_->AwaitStarted(1);
  device_->Reset();
  backend_->set_hold(false);
  // The completion is posted to the loop and ignored (stale generation).
  while (backend_->flushes() < 1) ASSERT_TRUE(loop_->RunOnce(10).ok());
  ASSERT_TRUE(loop_->RunOnce(10).ok());
  EXPECT_EQ(vq_->used_idx(), 0);
}

TEST(PmemDeviceCreateTest, RejectsBadOptions) {
  PmemOptions o;
  o.size = 0;
  EXPECT_FALSE(PmemDevice::Create(std::make_unique<FakePmemBackend>(), o).ok());
  o.size = 1 << 21;
  o.queue_size = 3;
  EXPECT_FALSE(PmemDevice::Create(std::make_unique<FakePmemBackend>(), o).ok());
  EXPECT_FALSE(PmemDevice::Create(nullptr, PmemOptions{}).ok());
}

TEST(FilePmemBackendTest, FlushesAndNoticesSizeChange) {
  char path[] = "/tmp/dsec-pmem-backend-XXXXXX";
  ScopedFd fd(::mkstemp(path));
  ASSERT_TRUE(fd.valid());
  ASSERT_EQ(::ftruncate(fd.get(), 8192), 0);
  auto backend = FilePmemBackend::Create(fd.get(), 8192).value();
  EXPECT_TRUE(backend->Flush().ok());
  EXPECT_TRUE(backend->CheckSize().ok());
  ASSERT_EQ(::ftruncate(fd.get(), 4096), 0);
  EXPECT_EQ(backend->CheckSize().code(), absl::StatusCode::kFailedPrecondition);
  ::unlink(path);
}

}  // namespace
}  // namespace dsec::devices
