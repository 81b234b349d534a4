// SPDX-License-Identifier: Apache-2.0
#include "devices/i8042/i8042_device.h"

#include <atomic>
#include <cstdint>

#include "gtest/gtest.h"

namespace dsec::devices {
namespace {

constexpr uint64_t kData = 0;
constexpr uint64_t kCmd = 4;
constexpr uint8_t kObf = 0x01;

class I8042DeviceTest : public ::testing::Test {
 protected:
  uint8_t In(uint64_t port) {
    uint8_t v = 0;
    dev_.Read(port, std::span<uint8_t>(&v, 1));
    return v;
  }
  void Out(uint64_t port, uint8_t v) { dev_.Write(port, std::span<const uint8_t>(&v, 1)); }

  std::atomic<int> resets_{0};
  I8042Device dev_{[this] { resets_.fetch_add(1); }};
};

TEST_F(I8042DeviceTest, OutputBufferStartsEmpty) {
  EXPECT_EQ(In(kCmd) & kObf, 0);
}

TEST_F(I8042DeviceTest, SelfTestAnswers55AndSetsSystemFlag) {
  Out(kCmd, 0x60);
  Out(kData, 0x00);  // clear SYS
  EXPECT_EQ(In(kCmd) & 0x04, 0);
  Out(kCmd, 0xaa);
  EXPECT_EQ(In(kCmd) & kObf, kObf);
  EXPECT_EQ(In(kData), 0x55);
  EXPECT_EQ(In(kCmd) & kObf, 0);
  EXPECT_EQ(In(kCmd) & 0x04, 0x04);
}

TEST_F(I8042DeviceTest, InterfaceTestsAnswerZero) {
  Out(kCmd, 0xab);
  EXPECT_EQ(In(kData), 0x00);
  Out(kCmd, 0xa9);
  EXPECT_EQ(In(kData), 0x00);
}

TEST_F(I8042DeviceTest, CommandByteReadAndWrite) {
  Out(kCmd, 0x20);
  EXPECT_EQ(In(kData), 0x47);
  Out(kCmd, 0x60);
  EXPECT_EQ(In(kCmd) & 0x08, 0x08);  // last write was a command
  Out(kData, 0x65);
  EXPECT_EQ(In(kCmd) & 0x08, 0);
  Out(kCmd, 0x20);
  EXPECT_EQ(In(kData), 0x65);
}

TEST_F(I8042DeviceTest, DisableAndEnablePortsToggleCommandByteBits) {
  Out(kCmd, 0xad);
  Out(kCmd, 0xa7);
  Out(kCmd, 0x20);
  EXPECT_EQ(In(kData) & 0x30, 0x30);
  Out(kCmd, 0xae);
  Out(kCmd, 0xa8);
  Out(kCmd, 0x20);
  EXPECT_EQ(In(kData) & 0x30, 0);
}

TEST_F(I8042DeviceTest, AuxLoopbackEchoesWithAuxStatusBit) {
  Out(kCmd, 0xd3);
  Out(kData, 0x5a);
  EXPECT_EQ(In(kCmd) & 0x21, 0x21);
  EXPECT_EQ(In(kData), 0x5a);
}

TEST_F(I8042DeviceTest, PulseResetCommandCallsResetCallback) {
  Out(kCmd, 0xfe);
  EXPECT_EQ(resets_, 1);
  Out(kCmd, 0xff);  // pulses no line
  EXPECT_EQ(resets_, 1);
  EXPECT_EQ(dev_.metrics().resets, 1u);
}

TEST_F(I8042DeviceTest, WritingOutputPortWithResetLowResets) {
  Out(kCmd, 0xd0);
  EXPECT_EQ(In(kData), 0x03);
  Out(kCmd, 0xd1);
  Out(kData, 0x03);
  EXPECT_EQ(resets_, 0);
  Out(kCmd, 0xd1);
  Out(kData, 0x02);
  EXPECT_EQ(resets_, 1);
}

TEST_F(I8042DeviceTest, IgnoresKeyboardBytesAndCountsUnknownCommands) {
  Out(kData, 0xf2);  // "identify keyboard": no keyboard answers
  EXPECT_EQ(In(kCmd) & kObf, 0);
  Out(kCmd, 0x12);
  auto m = dev_.metrics();
  EXPECT_EQ(m.ignored_device_writes, 1u);
  EXPECT_EQ(m.unknown_commands, 1u);
}

TEST_F(I8042DeviceTest, OutputQueueIsBounded) {
  for (int i = 0; i < 1000; ++i) Out(kCmd, 0xaa);
  int n = 0;
  while (In(kCmd) & kObf) {
    In(kData);
    ++n;
  }
  EXPECT_LE(n, 16);
  EXPECT_GT(n, 0);
}

TEST_F(I8042DeviceTest, UnmappedOffsetsReadAllOnes) {
  EXPECT_EQ(In(1), 0xff);
  Out(2, 0xfe);
  EXPECT_EQ(resets_, 0);
}

}  // namespace
}  // namespace dsec::devices
