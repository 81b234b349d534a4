// SPDX-License-Identifier: Apache-2.0
#include "devices/virtio/queue_worker.h"

#include <functional>
#include <memory>
#include <vector>

#include "base/event_loop.h"
#include "devices/virtio/activation.h"
#include "devices/virtio/queue.h"
#include "devices/virtio/virtqueue_builder.h"
#include "gtest/gtest.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::virtio {
namespace {

// Counts what a transport would see, and applies the driver's interrupt
// suppression the way MmioTransport does (Queue::NeedsInterrupt).
class FakeNotifier : public DriverNotifier {
 public:
  void SignalUsed(uint16_t index) override {
    ++signals;
    if (queues != nullptr && (*queues)[index].NeedsInterrupt()) ++interrupts;
  }
  void SignalConfigChanged() override {}
  void ReportBroken(const absl::Status& reason) override { broken.push_back(reason); }

  std::vector<Queue>* queues = nullptr;
  int signals = 0;
  int interrupts = 0;
  std::vector<absl::Status> broken;
};

class QueueWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mem_ = memory::FakeGuestMemory::Create({{0, 1 << 20}}).value();
    loop_ = EventLoop::Create().value();
    vq_ = std::make_unique<VirtQueueBuilder>(*mem_, 0x10000, 16);
    vq2_ = std::make_unique<VirtQueueBuilder>(*mem_, 0x80000, 16);
  }

  // Fresh queues over both rings, as a transport hands them to a device.
  ActivateContext MakeContext(uint64_t features = 0) {
    queues_.clear();
    queues_.push_back(vq_->MakeQueue(features));
    queues_.push_back(vq2_->MakeQueue(features));
    notifier_.queues = &queues_;
    ActivateContext ctx;
    ctx.acked_features = features | kFeatureVersion1;
    ctx.memory = mem_.get();
    ctx.queues = std::span<Queue>(queues_);
    ctx.notifier = &notifier_;
    ctx.loop = loop_.get();
    return ctx;
  }
  void Begin(uint64_t features = 0) { activation_.Begin(MakeContext(features)); }

  void AddChains(int n) {
    for (int i = 0; i < n; ++i) vq_->AddChain({}, {8});
  }

  // Runs what is posted to the loop now.
  void RunPosted() { ASSERT_TRUE(loop_->RunOnce(0).ok()); }

  std::unique_ptr<memory::FakeGuestMemory> mem_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<VirtQueueBuilder> vq_, vq2_;
  std::vector<Queue> queues_;
  FakeNotifier notifier_;
  int hook_calls_ = 0;
  Activation activation_{[this](const absl::Status&) { ++hook_calls_; }};
};

ChainResult UseAll(DescriptorChain& chain) {
  return ChainResult::Used(static_cast<uint32_t>(chain.WritableBytes()));
}

TEST_F(QueueWorkerTest, ReturnsEveryChainAndSignalsOncePerRun) {
  Begin();
  int resumes = 0;
  QueueWorker worker(activation_, 0, kDefaultChainBudget, [&] { ++resumes; });
  std::vector<uint16_t> heads;
  for (int i = 0; i < 5; ++i) heads.push_back(vq_->AddChain({}, {8}).head);
  RunResult r = worker.Run(UseAll);
  EXPECT_EQ(r.stop, RunStop::kEmpty);
  EXPECT_EQ(r.handled, 5u);
  ASSERT_EQ(vq_->used_idx(), 5);
  for (uint16_t i = 0; i < 5; ++i) {
    EXPECT_EQ(vq_->used(i).id, heads[i]);
    EXPECT_EQ(vq_->used(i).len, 8u);
  }
  EXPECT_EQ(notifier_.signals, 1);
  EXPECT_EQ(notifier_.interrupts, 1);
  // A run that returns nothing notifies nothing.
  EXPECT_EQ(worker.Run(UseAll).stop, RunStop::kEmpty);
  EXPECT_EQ(notifier_.signals, 1);
  EXPECT_FALSE(worker.continuation_posted());
  EXPECT_EQ(resumes, 0);
}

TEST_F(QueueWorkerTest, SignalGoesThroughEventIdxSuppression) {
  Begin(kFeatureRingEventIdx);
  QueueWorker worker(activation_, 0, kDefaultChainBudget, [] {});
  // The driver wants an interrupt only once used idx passes 3 (section
  // 2.7.10): a run returning two chains signals once but raises nothing.
  vq_->SetUsedEvent(3);
  vq_->AddChain({}, {4});
  vq_->AddChain({}, {4});
  worker.Run(UseAll);
  EXPECT_EQ(notifier_.signals, 1);
  EXPECT_EQ(notifier_.interrupts, 0);
  vq_->AddChain({}, {4});
  vq_->AddChain({}, {4});
  worker.Run(UseAll);
  EXPECT_EQ(notifier_.signals, 2);
  EXPECT_EQ(notifier_.interrupts, 1);
  // Pop published avail_event when it found the ring empty.
  EXPECT_EQ(vq_->avail_event(), 4);
}

TEST_F(QueueWorkerTest, BudgetPostsOneContinuationThatResumesTheQueue) {
  Begin();
  int resumes = 0;
  std::unique_ptr<QueueWorker> worker;
  worker = std::make_unique<QueueWorker>(activation_, 0, 4, [&] {
    ++resumes;
    worker->Run(UseAll);
  });
  for (int i = 0; i < 10; ++i) vq_->AddChain({}, {1});
  RunResult r = worker->Run(UseAll);
  EXPECT_EQ(r.stop, RunStop::kBudget);
  EXPECT_EQ(r.handled, 4u);
  EXPECT_EQ(vq_->used_idx(), 4);
  EXPECT_EQ(notifier_.signals, 1);
  EXPECT_TRUE(worker->continuation_posted());
  // A kick before the continuation runs does its own budget's worth but
  // does not post a second continuation.
  EXPECT_EQ(worker->Run(UseAll).stop, RunStop::kBudget);
  EXPECT_EQ(vq_->used_idx(), 8);
  RunPosted();
  EXPECT_EQ(resumes, 1);
  EXPECT_EQ(vq_->used_idx(), 10);
  EXPECT_FALSE(worker->continuation_posted());
  EXPECT_EQ(notifier_.signals, 3);
  RunPosted();
  EXPECT_EQ(resumes, 1);
}

TEST_F(QueueWorkerTest, PutBackEndsTheRunAndTheNextRunGetsTheSameChain) {
  Begin();
  QueueWorker worker(activation_, 0, kDefaultChainBudget, [] {});
  auto first = vq_->AddChain({}, {8});
  vq_->AddChain({}, {8});
  std::vector<uint16_t> seen;
  RunResult r = worker.Run([&](DescriptorChain& c) {
    seen.push_back(c.head);
    return ChainResult::PutBack();
  });
  EXPECT_EQ(r.stop, RunStop::kPutBack);
  EXPECT_EQ(seen, std::vector<uint16_t>{first.head});
  EXPECT_EQ(queues_[0].in_flight(), 0);
  EXPECT_EQ(vq_->used_idx(), 0);
  EXPECT_EQ(notifier_.signals, 0);
  r = worker.Run([&](DescriptorChain& c) {
    seen.push_back(c.head);
    return ChainResult::Used(0);
  });
  EXPECT_EQ(r.handled, 2u);
  ASSERT_EQ(vq_->used_idx(), 2);
  EXPECT_EQ(vq_->used(0).id, first.head);
}

TEST_F(QueueWorkerTest, RequeueOffersTheSameChainAgainWithinTheRun) {
  Begin();
  QueueWorker worker(activation_, 0, kDefaultChainBudget, [] {});
  auto added = vq_->AddChain({}, {8});
  std::vector<uint16_t> seen;
  RunResult r = worker.Run([&](DescriptorChain& c) {
    seen.push_back(c.head);
    return seen.size() < 3 ? ChainResult::Requeue() : ChainResult::Used(8);
  });
  EXPECT_EQ(r.stop, RunStop::kEmpty);
  EXPECT_EQ(r.handled, 3u);
  EXPECT_EQ(seen, (std::vector<uint16_t>{added.head, added.head, added.head}));
  EXPECT_EQ(vq_->used_idx(), 1);
}

TEST_F(QueueWorkerTest, RequeueCountsAgainstTheBudget) {
  Begin();
  QueueWorker worker(activation_, 0, 3, [] {});
  vq_->AddChain({}, {8});
  RunResult r = worker.Run([](DescriptorChain&) { return ChainResult::Requeue(); });
  EXPECT_EQ(r.stop, RunStop::kBudget);
  EXPECT_EQ(r.handled, 3u);
  EXPECT_EQ(queues_[0].in_flight(), 0);
}

TEST_F(QueueWorkerTest, ClosedAdmitGateStopsBeforePopping) {
  Begin();
  QueueWorker worker(activation_, 0, kDefaultChainBudget, [] {});
  AddChains(2);
  int admitted = 0;
  RunResult r = worker.Run([&] { return admitted++ < 1; }, UseAll);
  EXPECT_EQ(r.stop, RunStop::kNotAdmitted);
  EXPECT_EQ(r.handled, 1u);
  EXPECT_EQ(queues_[0].next_avail(), 1);
  EXPECT_EQ(notifier_.signals, 1);
}

TEST_F(QueueWorkerTest, KeptChainsAreCompletedLaterWithOneSignal) {
  Begin();
  QueueWorker worker(activation_, 0, kDefaultChainBudget, [] {});
  for (int i = 0; i < 3; ++i) vq_->AddChain({}, {8});
  std::vector<uint16_t> kept;
  worker.Run([&](DescriptorChain& c) {
    kept.push_back(c.head);
    return ChainResult::Kept();
  });
  EXPECT_EQ(vq_->used_idx(), 0);
  EXPECT_EQ(queues_[0].in_flight(), 3);
  EXPECT_EQ(notifier_.signals, 0);
  for (uint16_t head : kept) EXPECT_TRUE(worker.Complete(head, 1));
  EXPECT_EQ(notifier_.signals, 0);
  worker.SignalUsed();
  worker.SignalUsed();
  EXPECT_EQ(notifier_.signals, 1);
  EXPECT_EQ(vq_->used_idx(), 3);
}

TEST_F(QueueWorkerTest, HostileHeadMarksTheDeviceBrokenOnceAndStopsEveryQueue) {
  Begin();
  int resumes = 0;
  QueueWorker worker(activation_, 0, kDefaultChainBudget, [&] { ++resumes; });
  QueueWorker other(activation_, 1, kDefaultChainBudget, [&] { ++resumes; });
  auto kept = vq2_->AddChain({}, {8});
  int handled = 0;
  auto count = [&](DescriptorChain&) {
    ++handled;
    return ChainResult::Kept();
  };
  other.Run(count);
  ASSERT_EQ(handled, 1);
  vq_->PushAvail(99);  // head index out of range (queue size 16)
  RunResult r = worker.Run(count);
  EXPECT_EQ(r.stop, RunStop::kBroken);
  EXPECT_TRUE(activation_.broken());
  EXPECT_FALSE(activation_.running());
  ASSERT_EQ(notifier_.broken.size(), 1u);
  EXPECT_EQ(notifier_.broken[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(activation_.broken_reason(), notifier_.broken[0]);
  EXPECT_EQ(hook_calls_, 1);
  // Nothing more is processed, on this queue or any other, and nothing is
  // reported again.
  vq2_->AddChain({}, {8});
  EXPECT_EQ(worker.Run(count).stop, RunStop::kInactive);
  EXPECT_EQ(other.Run(count).stop, RunStop::kInactive);
  EXPECT_FALSE(other.Complete(kept.head, 8));
  EXPECT_EQ(handled, 1);
  EXPECT_EQ(vq2_->used_idx(), 0);
  activation_.MarkBroken(absl::InternalError("second"));
  EXPECT_EQ(notifier_.broken.size(), 1u);
  EXPECT_EQ(hook_calls_, 1);
  EXPECT_EQ(notifier_.signals, 0);
}

TEST_F(QueueWorkerTest, HandlerErrorsEndTheRunAndMarkTheDeviceBroken) {
  // The two ways a handler gives up: returning Broken, or marking the device
  // broken itself (then whatever it returns is ignored).
  const std::vector<std::function<ChainResult()>> ways = {
      [] { return ChainResult::Broken(absl::InternalError("backend gone")); },
      [this] {
        activation_.MarkBroken(absl::InternalError("backend gone"));
        return ChainResult::Used(0);
      },
  };
  for (const auto& give_up : ways) {
    Begin();
    notifier_.broken.clear();
    hook_calls_ = 0;
    QueueWorker worker(activation_, 0, kDefaultChainBudget, [] {});
    const uint16_t used_before = vq_->used_idx();
    AddChains(2);
    int handled = 0;
    RunResult r = worker.Run([&](DescriptorChain&) {
      ++handled;
      return give_up();
    });
    EXPECT_EQ(r.stop, RunStop::kBroken);
    EXPECT_EQ(handled, 1);
    EXPECT_EQ(vq_->used_idx(), used_before);
    ASSERT_EQ(notifier_.broken.size(), 1u);
    EXPECT_EQ(notifier_.broken[0].message(), "backend gone");
    EXPECT_EQ(hook_calls_, 1);
    activation_.End();
  }
}

TEST_F(QueueWorkerTest, ResetBetweenAPostedContinuationAndItsRunDoesNothing) {
  Begin();
  int resumes = 0;
  QueueWorker worker(activation_, 0, 1, [&] { ++resumes; });
  AddChains(2);
  ASSERT_EQ(worker.Run(UseAll).stop, RunStop::kBudget);
  ASSERT_TRUE(worker.continuation_posted());
  // The driver resets and sets the device up again before the loop gets to
  // the continuation: it belongs to the old rings and must not run.
  activation_.End();
  RunPosted();
  EXPECT_EQ(resumes, 0);
  Begin();
  EXPECT_FALSE(worker.continuation_posted());
  RunPosted();
  EXPECT_EQ(resumes, 0);
  // The new activation posts its own continuation again.
  AddChains(2);
  ASSERT_EQ(worker.Run(UseAll).stop, RunStop::kBudget);
  RunPosted();
  EXPECT_EQ(resumes, 1);
}

TEST_F(QueueWorkerTest, ContinuationOfADestroyedDeviceIsDropped) {
  struct Device {
    Activation activation;
    std::unique_ptr<QueueWorker> worker;
  };
  int resumes = 0;
  auto device = std::make_unique<Device>();
  device->worker =
      std::make_unique<QueueWorker>(device->activation, 0, 1, [&] { ++resumes; });
  device->activation.Begin(MakeContext());
  AddChains(2);
  ASSERT_EQ(device->worker->Run(UseAll).stop, RunStop::kBudget);
  device.reset();
  RunPosted();
  EXPECT_EQ(resumes, 0);
}

TEST_F(QueueWorkerTest, DoesNothingWhenInactiveOrQueueNotEnabled) {
  QueueWorker worker(activation_, 0, kDefaultChainBudget, [] {});
  vq_->AddChain({}, {8});
  int handled = 0;
  auto count = [&](DescriptorChain&) {
    ++handled;
    return ChainResult::Used(0);
  };
  EXPECT_EQ(worker.Run(count).stop, RunStop::kInactive);
  EXPECT_FALSE(worker.Complete(0, 0));
  Begin();
  queues_[0].Reset();  // the driver did not enable queue 0
  EXPECT_EQ(worker.Run(count).stop, RunStop::kInactive);
  EXPECT_EQ(handled, 0);
  EXPECT_TRUE(notifier_.broken.empty());
}

TEST_F(QueueWorkerTest, GuardRunsOnlyWithinItsActivation) {
  int runs = 0;
  std::function<void()> before = activation_.Guard([&] { ++runs; });
  before();
  EXPECT_EQ(runs, 0);
  Begin();
  std::function<void()> first = activation_.Guard([&] { ++runs; });
  first();
  EXPECT_EQ(runs, 1);
  activation_.End();
  Begin();
  first();
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(activation_.broken());
}

}  // namespace
}  // namespace dsec::virtio
