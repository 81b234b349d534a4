// SPDX-License-Identifier: Apache-2.0
#include "devices/acpi/acpi_pm_device.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace dsec::devices {
namespace {

uint16_t Read16(bus::BusDevice& d, uint64_t offset) {
  uint8_t b[2];
  d.Read(offset, b);
  return static_cast<uint16_t>(b[0] | (b[1] << 8));
}
void Write16(bus::BusDevice& d, uint64_t offset, uint16_t v) {
  const uint8_t b[2] = {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8)};
  d.Write(offset, b);
}

class AcpiPmDeviceTest : public ::testing::Test {
 protected:
  AcpiPmDevice pm_{5, [this] { ++offs_; }};
  int offs_ = 0;
};

// Linux's acpi_hw_legacy_sleep: SLP_TYP first, then SLP_TYP | SLP_EN.
TEST_F(AcpiPmDeviceTest, S5WithSlpEnPowersOff) {
  bus::BusDevice& cnt = *pm_.control_block();
  const uint16_t typ = 5u << AcpiPmDevice::kSlpTypShift;
  Write16(cnt, 0, typ);
  EXPECT_EQ(offs_, 0);
  EXPECT_EQ(Read16(cnt, 0), typ | AcpiPmDevice::kSciEn);
  Write16(cnt, 0, typ | AcpiPmDevice::kSlpEn);
  EXPECT_EQ(offs_, 1);
  EXPECT_EQ(pm_.metrics().soft_off, 1u);
  EXPECT_EQ(Read16(cnt, 0) & AcpiPmDevice::kSlpEn, 0) << "SLP_EN is write-only";
}

TEST_F(AcpiPmDeviceTest, OtherSleepTypesAreCountedAndIgnored) {
  bus::BusDevice& cnt = *pm_.control_block();
  Write16(cnt, 0, (3u << AcpiPmDevice::kSlpTypShift) | AcpiPmDevice::kSlpEn);
  Write16(cnt, 0, 5u << AcpiPmDevice::kSlpTypShift);  // no SLP_EN
  EXPECT_EQ(offs_, 0);
  EXPECT_EQ(pm_.metrics().ignored_sleeps, 1u);
}

TEST_F(AcpiPmDeviceTest, SciEnAlwaysReadsSetAndCannotBeCleared) {
  bus::BusDevice& cnt = *pm_.control_block();
  EXPECT_EQ(Read16(cnt, 0), AcpiPmDevice::kSciEn);
  Write16(cnt, 0, 0);
  EXPECT_EQ(Read16(cnt, 0), AcpiPmDevice::kSciEn);
}

TEST_F(AcpiPmDeviceTest, ByteWritesBuildTheRegister) {
  bus::BusDevice& cnt = *pm_.control_block();
  const uint16_t v = (5u << AcpiPmDevice::kSlpTypShift) | AcpiPmDevice::kSlpEn;
  const uint8_t hi[1] = {static_cast<uint8_t>(v >> 8)};
  cnt.Write(1, hi);
  EXPECT_EQ(offs_, 1);
}

TEST_F(AcpiPmDeviceTest, EventBlockStatusIsZeroAndEnableIsStored) {
  bus::BusDevice& evt = *pm_.event_block();
  Write16(evt, 0, 0xffff);  // write-1-to-clear: nothing is pending
  EXPECT_EQ(Read16(evt, 0), 0);
  Write16(evt, 2, 0x0121);
  EXPECT_EQ(Read16(evt, 2), 0x0121);
  uint8_t four[4];
  evt.Read(0, four);
  EXPECT_EQ(four[2], 0x21);
  EXPECT_EQ(four[3], 0x01);
  uint8_t past[2];
  evt.Read(3, past);  // straddles the end
  EXPECT_EQ(past[0], 0x01);
  EXPECT_EQ(past[1], 0);
}

}  // namespace
}  // namespace dsec::devices
