// SPDX-License-Identifier: Apache-2.0
#include "devices/virtio/queue.h"

#include <memory>

#include "devices/virtio/virtio_device.h"
#include "devices/virtio/virtqueue_builder.h"
#include "gtest/gtest.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::virtio {
namespace {

constexpr uint64_t kRam = 1 << 20;
constexpr uint64_t kBase = 0x10000;
constexpr uint16_t kSize = 8;

class QueueTest : public ::testing::Test {
 protected:
  QueueTest()
      : mem_(memory::FakeGuestMemory::Create({{0, kRam}}).value()), vq_(*mem_, kBase, kSize) {}

  // Pops and expects a ring violation.
  void ExpectBroken(Queue& queue) {
    auto chain = queue.Pop();
    ASSERT_FALSE(chain.ok());
    EXPECT_EQ(chain.status().code(), absl::StatusCode::kInvalidArgument) << chain.status();
  }

  std::unique_ptr<memory::FakeGuestMemory> mem_;
  VirtQueueBuilder vq_;
};

TEST_F(QueueTest, PopsNothingFromEmptyRing) {
  Queue queue = vq_.MakeQueue();
  auto chain = queue.Pop();
  ASSERT_TRUE(chain.ok());
  EXPECT_FALSE(chain->has_value());
}

TEST_F(QueueTest, PopsDirectChainReadableThenWritable) {
  Queue queue = vq_.MakeQueue();
  auto added = vq_.AddChain({{1, 2, 3}, {4}}, {64, 32});
  auto chain = queue.Pop();
  ASSERT_TRUE(chain.ok()) << chain.status();
  ASSERT_TRUE(chain->has_value());
  const DescriptorChain& c = **chain;
  EXPECT_EQ(c.head, added.head);
  ASSERT_EQ(c.readable.size(), 2u);
  ASSERT_EQ(c.writable.size(), 2u);
  EXPECT_EQ(c.readable[0].gpa, added.readable[0].gpa);
  EXPECT_EQ(c.ReadableBytes(), 4u);
  EXPECT_EQ(c.WritableBytes(), 96u);
  ChainReader reader(*mem_, c);
  std::vector<uint8_t> bytes(4);
  ASSERT_TRUE(reader.Read(bytes).ok());
  EXPECT_EQ(bytes, (std::vector<uint8_t>{1, 2, 3, 4}));
  EXPECT_EQ(queue.in_flight(), 1);
}

TEST_F(QueueTest, PopsIndirectChain) {
  Queue queue = vq_.MakeQueue(kFeatureRingIndirectDesc);
  auto added = vq_.AddIndirectChain({{9, 8}}, {16});
  auto chain = queue.Pop();
  ASSERT_TRUE(chain.ok()) << chain.status();
  ASSERT_TRUE(chain->has_value());
  EXPECT_EQ((*chain)->head, added.head);
  ASSERT_EQ((*chain)->readable.size(), 1u);
  EXPECT_EQ((*chain)->readable[0].gpa, added.readable[0].gpa);
  ASSERT_EQ((*chain)->writable.size(), 1u);
  EXPECT_EQ((*chain)->writable[0].len, 16u);
}

TEST_F(QueueTest, AcceptsDirectDescriptorsFollowedByIndirect) {
  Queue queue = vq_.MakeQueue(kFeatureRingIndirectDesc);
  uint64_t buf = vq_.Alloc(8);
  uint64_t table = vq_.Alloc(16, 16);
  vq_.WriteTable(table, {{buf, 8, kDescFlagWrite, 0}});
  vq_.SetDesc(0, {buf, 4, kDescFlagNext, 1});
  vq_.SetDesc(1, {table, 16, kDescFlagIndirect, 0});
  vq_.PushAvail(0);
  auto chain = queue.Pop();
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_EQ((*chain)->readable.size(), 1u);
  EXPECT_EQ((*chain)->writable.size(), 1u);
}

TEST_F(QueueTest, RejectsIndirectWithoutFeature) {
  Queue queue = vq_.MakeQueue();
  vq_.AddIndirectChain({{1}}, {});
  ExpectBroken(queue);
}

TEST_F(QueueTest, AddUsedPublishesElementAndIdx) {
  Queue queue = vq_.MakeQueue();
  auto added = vq_.AddChain({}, {16});
  ASSERT_TRUE(queue.Pop().ok());
  ASSERT_TRUE(queue.AddUsed(added.head, 12).ok());
  EXPECT_EQ(vq_.used_idx(), 1);
  EXPECT_EQ(vq_.used(0).id, added.head);
  EXPECT_EQ(vq_.used(0).len, 12u);
  EXPECT_EQ(queue.in_flight(), 0);
}

TEST_F(QueueTest, AddUsedRefusesHeadOutOfRangeAndUnpoppedChains) {
  Queue queue = vq_.MakeQueue();
  EXPECT_FALSE(queue.AddUsed(0, 0).ok());  // nothing popped
  vq_.AddChain({}, {16});
  ASSERT_TRUE(queue.Pop().ok());
  EXPECT_FALSE(queue.AddUsed(kSize, 0).ok());
}

TEST_F(QueueTest, IndicesWrapAround16Bits) {
  Queue queue = vq_.MakeQueue();
  for (int i = 0; i < 70000; ++i) {
    auto added = vq_.AddChain({}, {8});
    auto chain = queue.Pop();
    ASSERT_TRUE(chain.ok() && chain->has_value()) << i;
    ASSERT_TRUE(queue.AddUsed(added.head, 8).ok());
  }
  EXPECT_EQ(vq_.used_idx(), static_cast<uint16_t>(70000));
}

TEST_F(QueueTest, UndoPopReturnsTheSameChainAgain) {
  Queue queue = vq_.MakeQueue();
  auto added = vq_.AddChain({}, {8});
  ASSERT_TRUE(queue.Pop().ok());
  queue.UndoPop();
  auto chain = queue.Pop();
  ASSERT_TRUE(chain.ok() && chain->has_value());
  EXPECT_EQ((*chain)->head, added.head);
}

TEST_F(QueueTest, PopFailsWhenNotActive) {
  Queue queue(kSize);
  EXPECT_EQ(queue.Pop().status().code(), absl::StatusCode::kFailedPrecondition);
}

// --- Malformed rings --------------------------------------------------------

TEST_F(QueueTest, RejectsAvailIdxJumpLargerThanQueueSize) {
  Queue queue = vq_.MakeQueue();
  vq_.SetAvailIdx(kSize + 1);
  ExpectBroken(queue);
}

TEST_F(QueueTest, RejectsHeadIndexOutOfRange) {
  Queue queue = vq_.MakeQueue();
  vq_.PushAvail(kSize);
  ExpectBroken(queue);
}

TEST_F(QueueTest, RejectsNextIndexOutOfRange) {
  Queue queue = vq_.MakeQueue();
  vq_.SetDesc(0, {vq_.Alloc(8), 8, kDescFlagNext, kSize});
  vq_.PushAvail(0);
  ExpectBroken(queue);
}

TEST_F(QueueTest, RejectsDescriptorAddressOutsideRam) {
  Queue queue = vq_.MakeQueue();
  vq_.SetDesc(0, {kRam, 8, 0, 0});
  vq_.PushAvail(0);
  ExpectBroken(queue);
}

TEST_F(QueueTest, RejectsDescriptorRunningPastEndOfRam) {
  Queue queue = vq_.MakeQueue();
  vq_.SetDesc(0, {kRam - 4, 8, kDescFlagWrite, 0});
  vq_.PushAvail(0);
  ExpectBroken(queue);
}

TEST_F(QueueTest, RejectsLengthOverflowWhereAddrPlusLenWraps) {
  Queue queue = vq_.MakeQueue();
  vq_.SetDesc(0, {~0ull - 15, 0x100, 0, 0});
  vq_.PushAvail(0);
  ExpectBroken(queue);
}

TEST_F(QueueTest, RejectsLoopingChain) {
  Queue queue = vq_.MakeQueue();
  uint64_t buf = vq_.Alloc(8);
  vq_.SetDesc(0, {buf, 8, kDescFlagNext, 1});
  vq_.SetDesc(1, {buf, 8, kDescFlagNext, 0});
  vq_.PushAvail(0);
  ExpectBroken(queue);
}

TEST_F(QueueTest, RejectsSelfLoopingDescriptor) {
  Queue queue = vq_.MakeQueue();
  vq_.SetDesc(3, {vq_.Alloc(8), 8, kDescFlagNext, 3});
  vq_.PushAvail(3);
  ExpectBroken(queue);
}

TEST_F(QueueTest, RejectsLoopInsideIndirectTable) {
  Queue queue = vq_.MakeQueue(kFeatureRingIndirectDesc);
  uint64_t buf = vq_.Alloc(8);
  uint64_t table = vq_.Alloc(32, 16);
  vq_.WriteTable(table, {{buf, 8, kDescFlagNext, 1}, {buf, 8, kDescFlagNext, 0}});
  vq_.SetDesc(0, {table, 32, kDescFlagIndirect, 0});
  vq_.PushAvail(0);
  ExpectBroken(queue);
}

TEST_F(QueueTest, RejectsIndirectInsideIndirect) {
  Queue queue = vq_.MakeQueue(kFeatureRingIndirectDesc);
  uint64_t inner = vq_.Alloc(16, 16);
  vq_.WriteTable(inner, {{vq_.Alloc(8), 8, 0, 0}});
  uint64_t outer = vq_.Alloc(16, 16);
  vq_.WriteTable(outer, {{inner, 16, kDescFlagIndirect, 0}});
  vq_.SetDesc(0, {outer, 16, kDescFlagIndirect, 0});
  vq_.PushAvail(0);
  ExpectBroken(queue);
}

TEST_F(QueueTest, RejectsIndirectTableLengthNotMultipleOf16) {
  Queue queue = vq_.MakeQueue(kFeatureRingIndirectDesc);
  uint64_t table = vq_.Alloc(32, 16);
  vq_.WriteTable(table, {{vq_.Alloc(8), 8, 0, 0}});
  vq_.SetDesc(0, {table, 24, kDescFlagIndirect, 0});
  vq_.PushAvail(0);
  ExpectBroken(queue);
}

TEST_F(QueueTest, RejectsEmptyIndirectTable) {
  Queue queue = vq_.MakeQueue(kFeatureRingIndirectDesc);
  vq_.SetDesc(0, {vq_.Alloc(16, 16), 0, kDescFlagIndirect, 0});
  vq_.PushAvail(0);
  ExpectBroken(queue);
}

TEST_F(QueueTest, RejectsIndirectTableOutsideRam) {
  Queue queue = vq_.MakeQueue(kFeatureRingIndirectDesc);
  vq_.SetDesc(0, {kRam - 16, 32, kDescFlagIndirect, 0});
  vq_.PushAvail(0);
  ExpectBroken(queue);
}

TEST_F(QueueTest, RejectsIndirectWithNextFlag) {
  Queue queue = vq_.MakeQueue(kFeatureRingIndirectDesc);
  uint64_t table = vq_.Alloc(16, 16);
  vq_.WriteTable(table, {{vq_.Alloc(8), 8, 0, 0}});
  vq_.SetDesc(0, {table, 16, kDescFlagIndirect | kDescFlagNext, 1});
  vq_.SetDesc(1, {vq_.Alloc(8), 8, 0, 0});
  vq_.PushAvail(0);
  ExpectBroken(queue);
}

TEST_F(QueueTest, RejectsWriteOnlyDescriptorFollowedByReadable) {
  Queue queue = vq_.MakeQueue();
  vq_.SetDesc(0, {vq_.Alloc(8), 8, kDescFlagWrite | kDescFlagNext, 1});
  vq_.SetDesc(1, {vq_.Alloc(8), 8, 0, 0});
  vq_.PushAvail(0);
  ExpectBroken(queue);
}

TEST_F(QueueTest, RejectsWriteOnlyFollowedByReadableInIndirectTable) {
  Queue queue = vq_.MakeQueue(kFeatureRingIndirectDesc);
  uint64_t table = vq_.Alloc(32, 16);
  vq_.WriteTable(table,
                 {{vq_.Alloc(8), 8, kDescFlagWrite | kDescFlagNext, 1}, {vq_.Alloc(8), 8, 0, 0}});
  vq_.SetDesc(0, {table, 32, kDescFlagIndirect, 0});
  vq_.PushAvail(0);
  ExpectBroken(queue);
}

TEST_F(QueueTest, RejectsChainLongerThanQueueSize) {
  // A chain that visits every descriptor once and then one more is at least
  // size+1 long; with distinct indices it can only do so by looping, so
  // build the longest legal chain plus a NEXT from the last to the first.
  Queue queue = vq_.MakeQueue();
  uint64_t buf = vq_.Alloc(8);
  for (uint16_t i = 0; i < kSize; ++i) {
    vq_.SetDesc(i, {buf, 8, kDescFlagNext, static_cast<uint16_t>((i + 1) % kSize)});
  }
  vq_.PushAvail(0);
  ExpectBroken(queue);
}

TEST_F(QueueTest, AcceptsChainExactlyQueueSizeLong) {
  Queue queue = vq_.MakeQueue();
  uint64_t buf = vq_.Alloc(8);
  for (uint16_t i = 0; i < kSize; ++i) {
    bool last = i + 1 == kSize;
    vq_.SetDesc(
        i, {buf, 8, static_cast<uint16_t>(last ? 0 : kDescFlagNext), static_cast<uint16_t>(i + 1)});
  }
  vq_.PushAvail(0);
  auto chain = queue.Pop();
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_EQ((*chain)->readable.size(), kSize);
}

TEST_F(QueueTest, RejectsChainDescribingMoreThan4GiB) {
  // An indirect table of 4097 entries, each covering all 1 MiB of RAM:
  // every buffer is valid, but together they exceed what a u32 used length
  // can report.
  Queue queue = vq_.MakeQueue(kFeatureRingIndirectDesc);
  std::vector<VirtqDesc> table;
  for (uint16_t i = 0; i < 4097; ++i) {
    table.push_back({0, static_cast<uint32_t>(kRam), kDescFlagNext, static_cast<uint16_t>(i + 1)});
  }
  table.back().flags = 0;
  uint64_t gpa = vq_.Alloc(kDescSize * table.size(), 16);
  vq_.WriteTable(gpa, table);
  vq_.SetDesc(0, {gpa, static_cast<uint32_t>(kDescSize * table.size()), kDescFlagIndirect, 0});
  vq_.PushAvail(0);
  ExpectBroken(queue);
}

TEST_F(QueueTest, RejectsMoreChainsInFlightThanQueueSize) {
  // The driver keeps re-publishing the same head: after `size` pops without
  // AddUsed the avail idx must be lying.
  Queue queue = vq_.MakeQueue();
  vq_.SetDesc(0, {vq_.Alloc(8), 8, kDescFlagWrite, 0});
  for (int i = 0; i < kSize; ++i) {
    vq_.PushAvail(0);
    auto chain = queue.Pop();
    ASSERT_TRUE(chain.ok() && chain->has_value()) << i;
  }
  vq_.PushAvail(0);
  ExpectBroken(queue);
}

TEST_F(QueueTest, SkipsZeroLengthDescriptorsWithoutCheckingTheirAddress) {
  Queue queue = vq_.MakeQueue();
  vq_.SetDesc(0, {~0ull, 0, kDescFlagNext, 1});
  vq_.SetDesc(1, {vq_.Alloc(8), 8, kDescFlagWrite, 0});
  vq_.PushAvail(0);
  auto chain = queue.Pop();
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_TRUE((*chain)->readable.empty());
  EXPECT_EQ((*chain)->writable.size(), 1u);
}

// --- Activation checks ------------------------------------------------------

TEST_F(QueueTest, ActivationRejectsMisalignedDescTable) {
  Queue queue(kSize);
  vq_.Configure(queue);
  queue.set_desc_addr(vq_.desc_addr() + 8);
  EXPECT_FALSE(queue.Activate(*mem_, 0).ok());
  EXPECT_FALSE(queue.active());
}

TEST_F(QueueTest, ActivationRejectsMisalignedAvailAndUsedRings) {
  Queue queue(kSize);
  vq_.Configure(queue);
  queue.set_avail_addr(vq_.avail_addr() + 1);
  EXPECT_FALSE(queue.Activate(*mem_, 0).ok());
  vq_.Configure(queue);
  queue.set_used_addr(vq_.used_addr() + 2);
  EXPECT_FALSE(queue.Activate(*mem_, 0).ok());
}

TEST_F(QueueTest, ActivationRejectsRingsOutsideMemory) {
  Queue queue(kSize);
  vq_.Configure(queue);
  queue.set_used_addr(kRam - 16);  // used ring of 8 entries needs 70 bytes
  EXPECT_FALSE(queue.Activate(*mem_, 0).ok());
  vq_.Configure(queue);
  queue.set_desc_addr(~0ull - 15);
  EXPECT_FALSE(queue.Activate(*mem_, 0).ok());
}

TEST_F(QueueTest, ActivationRejectsBadSizes) {
  Queue queue(kSize);
  vq_.Configure(queue);
  queue.set_size(0);
  EXPECT_FALSE(queue.Activate(*mem_, 0).ok());
  queue.set_size(kSize * 2);
  EXPECT_FALSE(queue.Activate(*mem_, 0).ok());
  queue.set_size(6);
  EXPECT_FALSE(queue.Activate(*mem_, 0).ok());
  queue.set_size(4);
  EXPECT_TRUE(queue.Activate(*mem_, 0).ok());
}

TEST_F(QueueTest, QueueNotReadyStaysInactive) {
  Queue queue(kSize);
  EXPECT_TRUE(queue.Activate(*mem_, 0).ok());
  EXPECT_FALSE(queue.active());
}

TEST_F(QueueTest, ResetRestoresDefaults) {
  Queue queue = vq_.MakeQueue();
  queue.Reset();
  EXPECT_FALSE(queue.ready());
  EXPECT_FALSE(queue.active());
  EXPECT_EQ(queue.size(), kSize);
  EXPECT_EQ(queue.desc_addr(), 0u);
}

// --- Notification suppression ------------------------------------------------

TEST_F(QueueTest, InterruptsAfterUsedWithoutEventIdx) {
  Queue queue = vq_.MakeQueue();
  EXPECT_FALSE(queue.NeedsInterrupt());  // nothing added
  auto added = vq_.AddChain({}, {8});
  ASSERT_TRUE(queue.Pop().ok());
  ASSERT_TRUE(queue.AddUsed(added.head, 0).ok());
  EXPECT_TRUE(queue.NeedsInterrupt());
  EXPECT_FALSE(queue.NeedsInterrupt());  // already signalled
}

TEST_F(QueueTest, HonoursNoInterruptFlagWithoutEventIdx) {
  Queue queue = vq_.MakeQueue();
  vq_.SetAvailFlags(kAvailFlagNoInterrupt);
  auto added = vq_.AddChain({}, {8});
  ASSERT_TRUE(queue.Pop().ok());
  ASSERT_TRUE(queue.AddUsed(added.head, 0).ok());
  EXPECT_FALSE(queue.NeedsInterrupt());
}

TEST_F(QueueTest, EventIdxInterruptsOnlyWhenUsedEventIsCrossed) {
  Queue queue = vq_.MakeQueue(kFeatureRingEventIdx);
  vq_.SetUsedEvent(2);  // driver wants an interrupt when entry 2 is used
  for (int i = 0; i < 3; ++i) {
    auto added = vq_.AddChain({}, {8});
    ASSERT_TRUE(queue.Pop().ok());
    ASSERT_TRUE(queue.AddUsed(added.head, 0).ok());
    // used idx goes 1, 2, 3: only the step that makes entry 2 used (idx 2->3)
    // crosses used_event.
    EXPECT_EQ(queue.NeedsInterrupt(), i == 2) << i;
  }
}

TEST_F(QueueTest, EventIdxBatchCrossingUsedEventInterruptsOnce) {
  Queue queue = vq_.MakeQueue(kFeatureRingEventIdx);
  vq_.SetUsedEvent(0);
  for (int i = 0; i < 4; ++i) {
    auto added = vq_.AddChain({}, {8});
    ASSERT_TRUE(queue.Pop().ok());
    ASSERT_TRUE(queue.AddUsed(added.head, 0).ok());
  }
  EXPECT_TRUE(queue.NeedsInterrupt());
  EXPECT_FALSE(queue.NeedsInterrupt());
}

TEST_F(QueueTest, EventIdxIgnoresNoInterruptFlag) {
  Queue queue = vq_.MakeQueue(kFeatureRingEventIdx);
  vq_.SetAvailFlags(kAvailFlagNoInterrupt);
  vq_.SetUsedEvent(0);
  auto added = vq_.AddChain({}, {8});
  ASSERT_TRUE(queue.Pop().ok());
  ASSERT_TRUE(queue.AddUsed(added.head, 0).ok());
  EXPECT_TRUE(queue.NeedsInterrupt());
}

TEST_F(QueueTest, EventIdxPublishesAvailEventWhenRingDrained) {
  Queue queue = vq_.MakeQueue(kFeatureRingEventIdx);
  vq_.AddChain({}, {8});
  vq_.AddChain({}, {8});
  ASSERT_TRUE(queue.Pop().ok());
  ASSERT_TRUE(queue.Pop().ok());
  auto empty = queue.Pop();
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->has_value());
  // The driver should kick when it makes entry 2 available.
  EXPECT_EQ(vq_.avail_event(), 2);
}

TEST_F(QueueTest, VringNeedEventMatchesSpecFormula) {
  EXPECT_TRUE(VringNeedEvent(0, 1, 0));
  EXPECT_FALSE(VringNeedEvent(1, 1, 0));
  EXPECT_TRUE(VringNeedEvent(65535, 0, 65534));  // across the 16-bit wrap
  EXPECT_FALSE(VringNeedEvent(5, 3, 3));
}

}  // namespace
}  // namespace dsec::virtio
