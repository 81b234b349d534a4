// SPDX-License-Identifier: Apache-2.0
#include "devices/testdev/testdev_device.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/little_endian.h"
#include "devices/testdev/testdev_regs.h"
#include "gtest/gtest.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::devices {
namespace {

constexpr uint64_t kRam = 0x10000;

class RecordingListener : public TestDevice::Listener {
 public:
  void OnMessage(std::string_view message) override {
    absl::MutexLock lock(&mu_);
    messages.emplace_back(message);
  }
  void OnEvent(uint32_t code, int64_t mono_ns) override {
    absl::MutexLock lock(&mu_);
    events.emplace_back(code, mono_ns);
  }
  void OnShutdown(uint32_t code) override {
    absl::MutexLock lock(&mu_);
    shutdowns.push_back(code);
  }
  absl::Mutex mu_;
  std::vector<std::string> messages;
  std::vector<std::pair<uint32_t, int64_t>> events;
  std::vector<uint32_t> shutdowns;
};

class TestDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mem = memory::FakeGuestMemory::Create({{0, kRam}});
    ASSERT_TRUE(mem.ok());
    mem_ = std::move(mem).value();
    dev_ = std::make_unique<TestDevice>(*mem_, &listener_, &clock_,
                                        TestDevice::Limits{.max_messages = 4,
                                                           .max_message_bytes = 64,
                                                           .max_events = 2});
  }
  void Write32(uint64_t off, uint32_t v) {
    uint8_t b[4];
    StoreLe32(b, v);
    dev_->Write(off, b);
  }
  void Write64(uint64_t off, uint64_t v) {
    uint8_t b[8];
    StoreLe64(b, v);
    dev_->Write(off, b);
  }
  uint64_t Read(uint64_t off, size_t size) {
    uint8_t b[8] = {};
    dev_->Read(off, std::span<uint8_t>(b, size));
    return LoadLe(std::span<const uint8_t>(b, size));
  }
  void Send(uint64_t gpa, const std::string& text) {
    ASSERT_TRUE(mem_->Write(gpa, std::span<const uint8_t>(
                                     reinterpret_cast<const uint8_t*>(text.data()), text.size()))
                    .ok());
    Write64(DSEC_TESTDEV_REG_MSG_ADDR, gpa);
    Write32(DSEC_TESTDEV_REG_MSG_LEN, static_cast<uint32_t>(text.size()));
  }

  std::unique_ptr<memory::FakeGuestMemory> mem_;
  RecordingListener listener_;
  FakeClock clock_{1000};
  std::unique_ptr<TestDevice> dev_;
};

TEST_F(TestDeviceTest, ReadsMagicAndVersion) {
  EXPECT_EQ(Read(DSEC_TESTDEV_REG_MAGIC, 4), DSEC_TESTDEV_MAGIC_VALUE);
  EXPECT_EQ(Read(DSEC_TESTDEV_REG_VERSION, 4), DSEC_TESTDEV_VERSION_VALUE);
  EXPECT_EQ(Read(0, 8), DSEC_TESTDEV_MAGIC_VALUE |
                            (static_cast<uint64_t>(DSEC_TESTDEV_VERSION_VALUE) << 32));
  EXPECT_EQ(Read(DSEC_TESTDEV_REG_MSG_ADDR, 8), 0u);  // write-only
}

TEST_F(TestDeviceTest, IgnoresUnalignedAndOddSizedAccesses) {
  EXPECT_EQ(Read(0, 2), 0u);
  EXPECT_EQ(Read(2, 4), 0u);
  EXPECT_EQ(Read(4, 8), 0u);
  Write32(DSEC_TESTDEV_REG_SHUTDOWN + 2, 1);
  uint8_t one = 1;
  dev_->Write(DSEC_TESTDEV_REG_SHUTDOWN, std::span<const uint8_t>(&one, 1));
  EXPECT_TRUE(listener_.shutdowns.empty());
  EXPECT_EQ(dev_->metrics().ignored_accesses, 5u);
}

TEST_F(TestDeviceTest, DeliversMessageWithNonPrintableBytesStripped) {
  Send(0x1000, "boot ok=\x1b[31m1\n\x01\xff");
  ASSERT_EQ(listener_.messages.size(), 1u);
  EXPECT_EQ(listener_.messages[0], "boot ok=[31m1");
  EXPECT_EQ(dev_->metrics().messages, 1u);
}

TEST_F(TestDeviceTest, AcceptsAddressAsTwoHalfWrites) {
  const std::string text = "split";
  ASSERT_TRUE(mem_->Write(0x2345, std::span<const uint8_t>(
                                      reinterpret_cast<const uint8_t*>(text.data()), 5))
                  .ok());
  Write64(DSEC_TESTDEV_REG_MSG_ADDR, 0xdead0000beef0000ull);
  Write32(DSEC_TESTDEV_REG_MSG_ADDR, 0x2345);
  Write32(DSEC_TESTDEV_REG_MSG_ADDR + 4, 0);
  Write32(DSEC_TESTDEV_REG_MSG_LEN, 5);
  ASSERT_EQ(listener_.messages.size(), 1u);
  EXPECT_EQ(listener_.messages[0], "split");
}

TEST_F(TestDeviceTest, CountsMessagesOutsideMemoryOrTooLong) {
  Write64(DSEC_TESTDEV_REG_MSG_ADDR, kRam - 2);
  Write32(DSEC_TESTDEV_REG_MSG_LEN, 4);  // runs past the end of RAM
  Write64(DSEC_TESTDEV_REG_MSG_ADDR, ~0ull - 1);
  Write32(DSEC_TESTDEV_REG_MSG_LEN, 16);  // wraps
  Write64(DSEC_TESTDEV_REG_MSG_ADDR, 0);
  Write32(DSEC_TESTDEV_REG_MSG_LEN, DSEC_TESTDEV_MAX_MSG + 1);
  Write64(DSEC_TESTDEV_REG_MSG_LEN, 1ull << 40);
  EXPECT_TRUE(listener_.messages.empty());
  EXPECT_EQ(dev_->metrics().invalid_messages, 4u);
}

TEST_F(TestDeviceTest, EnforcesMessageCountAndByteBudgets) {
  Send(0x100, std::string(40, 'a'));
  Send(0x100, std::string(30, 'b'));  // 70 > 64 bytes: dropped
  Send(0x100, std::string(24, 'c'));  // exactly 64
  Send(0x100, "");                    // third
  Send(0x100, "");                    // fourth: the last allowed
  Send(0x100, "");                    // over the count
  EXPECT_EQ(listener_.messages.size(), 4u);
  auto m = dev_->metrics();
  EXPECT_EQ(m.messages, 4u);
  EXPECT_EQ(m.message_bytes, 64u);
  EXPECT_EQ(m.messages_dropped, 2u);
}

TEST_F(TestDeviceTest, TimestampsEventsAndBudgetsThem) {
  Write32(DSEC_TESTDEV_REG_EVENT, DSEC_TESTDEV_EVENT_FIRST_INSN);
  clock_.AdvanceNs(500);
  Write64(DSEC_TESTDEV_REG_EVENT, DSEC_TESTDEV_EVENT_FIRST_USER);
  Write32(DSEC_TESTDEV_REG_EVENT, DSEC_TESTDEV_EVENT_WORKLOAD_DONE);
  ASSERT_EQ(listener_.events.size(), 2u);
  EXPECT_EQ(listener_.events[0], std::make_pair(DSEC_TESTDEV_EVENT_FIRST_INSN, int64_t{1000}));
  EXPECT_EQ(listener_.events[1], std::make_pair(DSEC_TESTDEV_EVENT_FIRST_USER, int64_t{1500}));
  EXPECT_EQ(dev_->metrics().events_dropped, 1u);
}

TEST_F(TestDeviceTest, DeliversFirstShutdownOnly) {
  Write32(DSEC_TESTDEV_REG_SHUTDOWN, 7);
  Write32(DSEC_TESTDEV_REG_SHUTDOWN, 0);
  ASSERT_EQ(listener_.shutdowns.size(), 1u);
  EXPECT_EQ(listener_.shutdowns[0], 7u);
  EXPECT_EQ(dev_->metrics().shutdowns_ignored, 1u);
}

TEST_F(TestDeviceTest, DefaultLimitsAllow4096Messages) {
  TestDevice dev(*mem_, &listener_, &clock_);
  uint8_t len[4] = {1, 0, 0, 0};
  for (int i = 0; i < 5000; ++i) dev.Write(DSEC_TESTDEV_REG_MSG_LEN, len);
  EXPECT_EQ(dev.metrics().messages, 4096u);
  EXPECT_EQ(dev.metrics().messages_dropped, 5000u - 4096u);
}

}  // namespace
}  // namespace dsec::devices
