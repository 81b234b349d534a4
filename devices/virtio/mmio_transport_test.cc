// SPDX-License-Identifier: Apache-2.0
#include "devices/virtio/mmio_transport.h"

#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>

#include "base/json_fields.h"
#include "platform/interrupt/fake_interrupt_line.h"
#include "devices/virtio/virtqueue_builder.h"
#include "gtest/gtest.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::virtio {
namespace {

constexpr uint64_t kDeviceFeatureBit = 1ull << 3;

// Echoes: on each kick, every chain gets its writable bytes filled with 0xAB
// and returned. Ring errors go to ReportBroken.
class EchoDevice : public VirtioDevice {
 public:
  DeviceType device_type() const override { return DeviceType::kEntropy; }
  uint64_t device_features() const override {
    return kDeviceFeatureBit | kFeatureRingEventIdx | kFeatureRingIndirectDesc | kFeatureRingPacked;
  }
  uint16_t num_queues() const override { return 2; }
  uint16_t queue_max_size(uint16_t) const override { return 16; }
  void ReadConfig(uint64_t offset, std::span<uint8_t> data) override {
    for (size_t i = 0; i < data.size(); ++i) {
      data[i] = offset + i < sizeof(config) ? config[offset + i] : 0;
    }
  }
  void WriteConfig(uint64_t offset, std::span<const uint8_t> data) override {
    for (size_t i = 0; i < data.size(); ++i) {
      if (offset + i < sizeof(config)) config[offset + i] = data[i];
    }
  }
  absl::Status Activate(const ActivateContext& context) override {
    ++activations;
    ctx = context;
    return activate_result;
  }
  void QueueNotify(uint16_t index) override {
    ++notifies;
    Queue& q = ctx.queues[index];
    while (true) {
      auto chain = q.Pop();
      if (!chain.ok()) {
        ctx.notifier->ReportBroken(chain.status());
        return;
      }
      if (!chain->has_value()) break;
      ChainWriter writer(*ctx.memory, **chain);
      std::vector<uint8_t> bytes(writer.Remaining(), 0xAB);
      (void)writer.Write(bytes);
      (void)q.AddUsed((*chain)->head, static_cast<uint32_t>(writer.written()));
    }
    ctx.notifier->SignalUsed(index);
  }
  void Reset() override {
    ++resets;
    ctx = {};
  }
  absl::StatusOr<nlohmann::json> SaveState() const override {
    return nlohmann::json{{"config0", config[0]}};
  }
  absl::Status RestoreState(const nlohmann::json& state) override {
    if (!state.is_object() || !state.contains("config0")) {
      return absl::InvalidArgumentError("echo: bad state");
    }
    config[0] = state["config0"].get<uint8_t>();
    ++restores;
    return absl::OkStatus();
  }

  uint8_t config[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int activations = 0;
  int notifies = 0;
  int resets = 0;
  int restores = 0;
  absl::Status activate_result;
  ActivateContext ctx;
};

class FakeRegistrar : public NotifyRegistrar {
 public:
  struct Entry {
    uint64_t gpa;
    uint32_t len;
    uint64_t datamatch;
    int fd;
  };
  absl::StatusOr<std::unique_ptr<NotifyRegistration>> Register(uint64_t gpa, uint32_t len,
                                                               uint64_t datamatch,
                                                               int fd) override {
    entries.push_back({gpa, len, datamatch, fd});
    return std::make_unique<NotifyRegistration>();
  }
  std::vector<Entry> entries;
};

class MmioTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mem_ = memory::FakeGuestMemory::Create({{0, 1 << 20}}).value();
    loop_ = EventLoop::Create().value();
    device_ = std::make_shared<EchoDevice>();
    irq_ = std::make_shared<devices::FakeInterruptLine>();
    MmioTransport::Options o;
    o.name = "test";
    o.base = 0xd0000000;
    o.device = device_;
    o.memory = mem_.get();
    o.interrupt = irq_;
    o.loop = loop_.get();
    o.registrar = &registrar_;
    transport_ = MmioTransport::Create(std::move(o)).value();
  }

  uint32_t R(uint64_t off) {
    uint32_t v;
    transport_->Read(off, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&v), 4));
    return v;
  }
  void W(uint64_t off, uint32_t v) {
    transport_->Write(off, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&v), 4));
  }
  void Pump() {
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(loop_->RunOnce(0).ok());
  }
  void Negotiate(uint64_t features = kFeatureVersion1) {
    W(mmio::kStatus, kStatusAcknowledge);
    W(mmio::kStatus, kStatusAcknowledge | kStatusDriver);
    W(mmio::kDriverFeaturesSel, 0);
    W(mmio::kDriverFeatures, static_cast<uint32_t>(features));
    W(mmio::kDriverFeaturesSel, 1);
    W(mmio::kDriverFeatures, static_cast<uint32_t>(features >> 32));
    W(mmio::kStatus, kStatusAcknowledge | kStatusDriver | kStatusFeaturesOk);
  }
  void SetupQueue(uint16_t index, const VirtQueueBuilder& vq) {
    W(mmio::kQueueSel, index);
    W(mmio::kQueueNum, vq.size());
    W(mmio::kQueueDescLow, static_cast<uint32_t>(vq.desc_addr()));
    W(mmio::kQueueDescHigh, static_cast<uint32_t>(vq.desc_addr() >> 32));
    W(mmio::kQueueDriverLow, static_cast<uint32_t>(vq.avail_addr()));
    W(mmio::kQueueDriverHigh, 0);
    W(mmio::kQueueDeviceLow, static_cast<uint32_t>(vq.used_addr()));
    W(mmio::kQueueDeviceHigh, 0);
    W(mmio::kQueueReady, 1);
  }
  // A second transport over the same memory, loop and interrupt line.
  std::shared_ptr<MmioTransport> Another(const std::string& name,
                                         std::shared_ptr<EchoDevice> device) {
    MmioTransport::Options o;
    o.name = name;
    o.device = std::move(device);
    o.memory = mem_.get();
    o.interrupt = irq_;
    o.loop = loop_.get();
    return MmioTransport::Create(std::move(o)).value();
  }
  void DriverOk() {
    W(mmio::kStatus, kStatusAcknowledge | kStatusDriver | kStatusFeaturesOk | kStatusDriverOk);
    Pump();
  }

  std::unique_ptr<memory::FakeGuestMemory> mem_;
  std::unique_ptr<EventLoop> loop_;
  std::shared_ptr<EchoDevice> device_;
  std::shared_ptr<devices::FakeInterruptLine> irq_;
  FakeRegistrar registrar_;
  std::shared_ptr<MmioTransport> transport_;
};

TEST_F(MmioTransportTest, ReadsIdentityRegisters) {
  EXPECT_EQ(R(mmio::kMagicValue), 0x74726976u);
  EXPECT_EQ(R(mmio::kVersion), 2u);
  EXPECT_EQ(R(mmio::kDeviceId), 4u);
  EXPECT_EQ(R(mmio::kVendorId), mmio::kVendor);
  EXPECT_EQ(R(mmio::kStatus), 0u);
}

TEST_F(MmioTransportTest, OffersDeviceFeaturesPlusVersion1WithoutUnsupportedRingFeatures) {
  W(mmio::kDeviceFeaturesSel, 0);
  EXPECT_EQ(
      R(mmio::kDeviceFeatures),
      static_cast<uint32_t>(kDeviceFeatureBit | kFeatureRingEventIdx | kFeatureRingIndirectDesc));
  W(mmio::kDeviceFeaturesSel, 1);
  EXPECT_EQ(R(mmio::kDeviceFeatures), 1u);  // VERSION_1 only; RING_PACKED masked
  W(mmio::kDeviceFeaturesSel, 2);
  EXPECT_EQ(R(mmio::kDeviceFeatures), 0u);
}

TEST_F(MmioTransportTest, AcceptsFeaturesOkForOfferedSubset) {
  Negotiate(kFeatureVersion1 | kDeviceFeatureBit);
  EXPECT_TRUE(R(mmio::kStatus) & kStatusFeaturesOk);
}

TEST_F(MmioTransportTest, RefusesFeaturesOkWhenDriverAcksUnknownBits) {
  Negotiate(kFeatureVersion1 | (1ull << 5));
  EXPECT_FALSE(R(mmio::kStatus) & kStatusFeaturesOk);
}

TEST_F(MmioTransportTest, RefusesFeaturesOkWithoutVersion1) {
  Negotiate(kDeviceFeatureBit);
  EXPECT_FALSE(R(mmio::kStatus) & kStatusFeaturesOk);
}

TEST_F(MmioTransportTest, RefusesFeaturesOkForPackedRing) {
  Negotiate(kFeatureVersion1 | kFeatureRingPacked);
  EXPECT_FALSE(R(mmio::kStatus) & kStatusFeaturesOk);
}

TEST_F(MmioTransportTest, IgnoresDriverFeatureWritesAfterFeaturesOk) {
  Negotiate(kFeatureVersion1);
  W(mmio::kDriverFeaturesSel, 0);
  W(mmio::kDriverFeatures, 1u << 5);
  VirtQueueBuilder vq(*mem_, 0x10000, 16);
  SetupQueue(0, vq);
  DriverOk();
  ASSERT_EQ(device_->activations, 1);
  EXPECT_EQ(device_->ctx.acked_features, kFeatureVersion1);
}

TEST_F(MmioTransportTest, DriverOkWithoutFeaturesOkIsNotAccepted) {
  W(mmio::kStatus, kStatusAcknowledge);
  W(mmio::kStatus, kStatusAcknowledge | kStatusDriver | kStatusDriverOk);
  Pump();
  EXPECT_FALSE(R(mmio::kStatus) & kStatusDriverOk);
  EXPECT_EQ(device_->activations, 0);
}

TEST_F(MmioTransportTest, StatusBitsCannotBeClearedWithoutReset) {
  Negotiate();
  W(mmio::kStatus, kStatusAcknowledge);
  EXPECT_EQ(R(mmio::kStatus), kStatusAcknowledge | kStatusDriver | kStatusFeaturesOk);
}

TEST_F(MmioTransportTest, DriverCannotSetDeviceNeedsReset) {
  W(mmio::kStatus, kStatusAcknowledge | kStatusDeviceNeedsReset);
  EXPECT_EQ(R(mmio::kStatus), kStatusAcknowledge);
}

TEST_F(MmioTransportTest, DriverOkActivatesDeviceWithConfiguredQueues) {
  Negotiate(kFeatureVersion1 | kFeatureRingEventIdx);
  VirtQueueBuilder vq(*mem_, 0x10000, 8);
  SetupQueue(0, vq);
  DriverOk();
  ASSERT_EQ(device_->activations, 1);
  EXPECT_EQ(device_->ctx.acked_features, kFeatureVersion1 | kFeatureRingEventIdx);
  ASSERT_EQ(device_->ctx.queues.size(), 2u);
  EXPECT_TRUE(device_->ctx.queues[0].active());
  EXPECT_EQ(device_->ctx.queues[0].size(), 8);
  EXPECT_FALSE(device_->ctx.queues[1].ready());
  EXPECT_EQ(device_->ctx.memory, mem_.get());
  EXPECT_EQ(device_->ctx.loop, loop_.get());
}

TEST_F(MmioTransportTest, QueueNotifyWriteReachesDeviceAndRaisesUsedInterrupt) {
  Negotiate();
  VirtQueueBuilder vq(*mem_, 0x10000, 16);
  SetupQueue(0, vq);
  DriverOk();
  irq_->TakeCount();
  auto added = vq.AddChain({}, {4});
  W(mmio::kQueueNotify, 0);
  Pump();
  ASSERT_EQ(vq.used_idx(), 1);
  EXPECT_EQ(vq.used(0).len, 4u);
  EXPECT_EQ(vq.ReadBytes(added.writable[0].gpa, 4), std::vector<uint8_t>(4, 0xAB));
  EXPECT_EQ(irq_->count(), 1u);
  EXPECT_EQ(R(mmio::kInterruptStatus), mmio::kIsrUsedBuffer);
  W(mmio::kInterruptAck, mmio::kIsrUsedBuffer);
  EXPECT_EQ(R(mmio::kInterruptStatus), 0u);
}

// Snapshots: a second transport over the same guest memory, restored from
// the first one's state, serves the driver's next request where the first
// left off (its ring positions carried), with the device's own state.
TEST_F(MmioTransportTest, RestoredStateServesTheNextRequestWhereTheFirstLeftOff) {
  Negotiate();
  VirtQueueBuilder vq(*mem_, 0x10000, 16);
  SetupQueue(0, vq);
  DriverOk();
  vq.AddChain({}, {4});
  W(mmio::kQueueNotify, 0);
  Pump();
  ASSERT_EQ(vq.used_idx(), 1);
  device_->config[0] = 42;
  absl::StatusOr<nlohmann::json> state = transport_->SaveState();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ((*state)["queues"][0]["next_avail"], 1);
  EXPECT_EQ((*state)["queues"][0]["used_idx"], 1);

  auto device2 = std::make_shared<EchoDevice>();
  auto t2 = Another("restored", device2);
  ASSERT_TRUE(t2->RestoreState(*state).ok());
  EXPECT_EQ(device2->restores, 1);
  EXPECT_EQ(device2->activations, 1);
  EXPECT_EQ(device2->config[0], 42);
  EXPECT_EQ(t2->status(), R(mmio::kStatus));
  // The next request: the restored device takes it, not the old one again.
  auto next = vq.AddChain({}, {8});
  Pump();
  ASSERT_EQ(vq.used_idx(), 2);
  EXPECT_EQ(vq.used(1).id, next.head);
  EXPECT_EQ(vq.used(1).len, 8u);
}

TEST_F(MmioTransportTest, HostileRestoredStateIsRefusedNamingTheField) {
  Negotiate();
  VirtQueueBuilder vq(*mem_, 0x10000, 16);
  SetupQueue(0, vq);
  DriverOk();
  const nlohmann::json good = transport_->SaveState().value();
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string field;
  };
  const Case cases[] = {
      {[](nlohmann::json& j) { j["queues"].erase(1); }, "fresh.queues"},
      {[](nlohmann::json& j) { j["queues"][0]["size"] = 17; }, "fresh.queues[0].size"},
      {[](nlohmann::json& j) { j["queues"][0]["next_avail"] = 70000; }, "fresh.queues[0].next_avail"},
      {[](nlohmann::json& j) { j["queues"][0]["desc"] = 1ull << 40; }, "fresh.queues[0]"},
      {[](nlohmann::json& j) { j["driver_features"] = 1ull << 5; }, "fresh.driver_features"},
      {[](nlohmann::json& j) { j["status"] = kStatusAcknowledge; }, "fresh.active"},
      {[](nlohmann::json& j) { j["isr"] = 7; }, "fresh.isr"},
      {[](nlohmann::json& j) { j["surprise"] = 1; }, "fresh.surprise"},
      {[](nlohmann::json& j) { j.erase("device"); }, "fresh.device"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = good;
    c.edit(j);
    auto t = Another("fresh", std::make_shared<EchoDevice>());
    absl::Status s = t->RestoreState(j);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field << ": " << s;
    EXPECT_EQ(FieldOf(s).value_or(""), c.field) << s;
  }
}

TEST_F(MmioTransportTest, QueueNotifyForUnknownQueueIsIgnored) {
  Negotiate();
  VirtQueueBuilder vq(*mem_, 0x10000, 16);
  SetupQueue(0, vq);
  DriverOk();
  int before = device_->notifies;
  W(mmio::kQueueNotify, 7);
  Pump();
  EXPECT_EQ(device_->notifies, before);
}

TEST_F(MmioTransportTest, KickBeforeActivationIsNotLost) {
  Negotiate();
  VirtQueueBuilder vq(*mem_, 0x10000, 16);
  SetupQueue(0, vq);
  vq.AddChain({}, {4});
  W(mmio::kStatus, kStatusAcknowledge | kStatusDriver | kStatusFeaturesOk | kStatusDriverOk);
  W(mmio::kQueueNotify, 0);
  Pump();
  EXPECT_EQ(vq.used_idx(), 1);
}

TEST_F(MmioTransportTest, QueueSetupRefusedAfterDriverOk) {
  Negotiate();
  VirtQueueBuilder vq(*mem_, 0x10000, 16);
  SetupQueue(0, vq);
  DriverOk();
  W(mmio::kQueueSel, 0);
  W(mmio::kQueueNum, 4);
  W(mmio::kQueueReady, 0);
  EXPECT_EQ(R(mmio::kQueueNum), 16u);
  EXPECT_EQ(R(mmio::kQueueReady), 1u);
}

TEST_F(MmioTransportTest, QueueNumMaxIsZeroForMissingQueue) {
  W(mmio::kQueueSel, 0);
  EXPECT_EQ(R(mmio::kQueueNumMax), 16u);
  W(mmio::kQueueSel, 2);
  EXPECT_EQ(R(mmio::kQueueNumMax), 0u);
}

TEST_F(MmioTransportTest, ResetClearsStatusQueuesAndResetsDevice) {
  Negotiate();
  VirtQueueBuilder vq(*mem_, 0x10000, 8);
  SetupQueue(0, vq);
  DriverOk();
  W(mmio::kStatus, 0);
  EXPECT_EQ(R(mmio::kStatus), 0u);  // reads back 0 at once
  W(mmio::kQueueSel, 0);
  EXPECT_EQ(R(mmio::kQueueReady), 0u);
  EXPECT_EQ(R(mmio::kQueueNum), 16u);
  Pump();
  EXPECT_EQ(device_->resets, 1);
  // The device can be brought up again.
  Negotiate();
  SetupQueue(0, vq);
  DriverOk();
  EXPECT_EQ(device_->activations, 2);
}

TEST_F(MmioTransportTest, ResetBeforePostedActivationRunsCancelsIt) {
  Negotiate();
  VirtQueueBuilder vq(*mem_, 0x10000, 8);
  SetupQueue(0, vq);
  W(mmio::kStatus, kStatusAcknowledge | kStatusDriver | kStatusFeaturesOk | kStatusDriverOk);
  W(mmio::kStatus, 0);
  Pump();
  EXPECT_EQ(device_->activations, 0);
}

TEST_F(MmioTransportTest, ConfigSpaceIsForwardedToDevice) {
  uint8_t b = 0;
  transport_->Read(mmio::kConfig + 2, std::span<uint8_t>(&b, 1));
  EXPECT_EQ(b, 3);
  uint16_t v = 0x9988;
  transport_->Write(mmio::kConfig + 4, std::span<const uint8_t>(reinterpret_cast<uint8_t*>(&v), 2));
  EXPECT_EQ(device_->config[4], 0x88);
  EXPECT_EQ(device_->config[5], 0x99);
  uint64_t past = 1;
  transport_->Read(mmio::kConfig + 64, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&past), 8));
  EXPECT_EQ(past, 0u);
}

TEST_F(MmioTransportTest, ConfigChangeBumpsGenerationAndInterruptsAfterDriverOk) {
  Negotiate();
  VirtQueueBuilder vq(*mem_, 0x10000, 8);
  SetupQueue(0, vq);
  DriverOk();
  uint32_t gen = R(mmio::kConfigGeneration);
  irq_->TakeCount();
  device_->ctx.notifier->SignalConfigChanged();
  EXPECT_EQ(R(mmio::kConfigGeneration), gen + 1);
  EXPECT_EQ(irq_->count(), 1u);
  EXPECT_TRUE(R(mmio::kInterruptStatus) & mmio::kIsrConfigChange);
}

TEST_F(MmioTransportTest, RingViolationSetsNeedsResetAndRaisesConfigInterrupt) {
  Negotiate();
  VirtQueueBuilder vq(*mem_, 0x10000, 16);
  SetupQueue(0, vq);
  DriverOk();
  irq_->TakeCount();
  vq.PushAvail(99);  // head out of range
  W(mmio::kQueueNotify, 0);
  Pump();
  EXPECT_TRUE(R(mmio::kStatus) & kStatusDeviceNeedsReset);
  EXPECT_TRUE(R(mmio::kInterruptStatus) & mmio::kIsrConfigChange);
  EXPECT_EQ(irq_->count(), 1u);
  // Registers keep working; the data plane is stopped.
  EXPECT_EQ(R(mmio::kMagicValue), mmio::kMagic);
  int notifies = device_->notifies;
  W(mmio::kQueueNotify, 0);
  Pump();
  EXPECT_EQ(device_->notifies, notifies);
  // A reset clears the condition.
  W(mmio::kStatus, 0);
  Pump();
  EXPECT_EQ(R(mmio::kStatus), 0u);
  EXPECT_EQ(device_->resets, 1);
}

TEST_F(MmioTransportTest, InvalidQueueConfigAtDriverOkSetsNeedsReset) {
  Negotiate();
  VirtQueueBuilder vq(*mem_, 0x10000, 16);
  SetupQueue(0, vq);
  W(mmio::kQueueSel, 0);
  W(mmio::kQueueDescLow, 0x10008);  // misaligned
  DriverOk();
  EXPECT_TRUE(R(mmio::kStatus) & kStatusDeviceNeedsReset);
  EXPECT_EQ(device_->activations, 0);
}

TEST_F(MmioTransportTest, FailedDeviceActivationSetsNeedsReset) {
  device_->activate_result = absl::InternalError("backend gone");
  Negotiate();
  VirtQueueBuilder vq(*mem_, 0x10000, 16);
  SetupQueue(0, vq);
  DriverOk();
  EXPECT_TRUE(R(mmio::kStatus) & kStatusDeviceNeedsReset);
  W(mmio::kStatus, 0);
  Pump();
  EXPECT_EQ(device_->resets, 1);
}

TEST_F(MmioTransportTest, RegistersOneNotifyRoutePerQueue) {
  ASSERT_EQ(registrar_.entries.size(), 2u);
  for (uint64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(registrar_.entries[i].gpa, 0xd0000050u);
    EXPECT_EQ(registrar_.entries[i].len, 4u);
    EXPECT_EQ(registrar_.entries[i].datamatch, i);
  }
}

TEST_F(MmioTransportTest, IoeventfdKickReachesDevice) {
  Negotiate();
  VirtQueueBuilder vq(*mem_, 0x10000, 16);
  SetupQueue(0, vq);
  DriverOk();
  vq.AddChain({}, {4});
  // What KVM does for a matching guest write: signal the registered fd.
  uint64_t one = 1;
  ASSERT_EQ(write(registrar_.entries[0].fd, &one, sizeof(one)), 8);
  Pump();
  EXPECT_EQ(vq.used_idx(), 1);
}

TEST_F(MmioTransportTest, IgnoresNarrowRegisterAccesses) {
  uint16_t v = 0xffff;
  transport_->Read(mmio::kMagicValue, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&v), 2));
  EXPECT_EQ(v, 0);
  uint8_t b = kStatusAcknowledge;
  transport_->Write(mmio::kStatus, std::span<const uint8_t>(&b, 1));
  EXPECT_EQ(R(mmio::kStatus), 0u);
}

TEST_F(MmioTransportTest, DestroyingActiveTransportResetsDevice) {
  Negotiate();
  VirtQueueBuilder vq(*mem_, 0x10000, 16);
  SetupQueue(0, vq);
  DriverOk();
  transport_.reset();
  EXPECT_EQ(device_->resets, 1);
  Pump();  // nothing posted may touch the destroyed transport
}

}  // namespace
}  // namespace dsec::virtio
