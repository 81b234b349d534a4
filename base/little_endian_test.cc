// SPDX-License-Identifier: Apache-2.0
#include "base/little_endian.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace dsec {
namespace {

TEST(LittleEndianTest, LoadsAndStoresAtAnyAlignment) {
  uint8_t buf[11] = {};
  StoreLe16(buf + 1, 0x0102);
  EXPECT_EQ(buf[1], 0x02);
  EXPECT_EQ(buf[2], 0x01);
  EXPECT_EQ(LoadLe16(buf + 1), 0x0102);
  StoreLe32(buf + 1, 0xA1B2C3D4u);
  EXPECT_EQ(buf[1], 0xD4);
  EXPECT_EQ(buf[4], 0xA1);
  EXPECT_EQ(LoadLe32(buf + 1), 0xA1B2C3D4u);
  StoreLe64(buf + 3, 0x0102030405060708ull);
  EXPECT_EQ(buf[3], 0x08);
  EXPECT_EQ(buf[10], 0x01);
  EXPECT_EQ(LoadLe64(buf + 3), 0x0102030405060708ull);
  // Bytes with the top bit set are not sign-extended.
  const uint8_t high[8] = {0xff, 0xfe, 0xfd, 0xfc, 0xfb, 0xfa, 0xf9, 0xf8};
  EXPECT_EQ(LoadLe32(high), 0xfcfdfeffu);
  EXPECT_EQ(LoadLe64(high), 0xf8f9fafbfcfdfeffull);
}

TEST(LittleEndianTest, AppendsToStrings) {
  std::string s = "x";
  AppendLe32(&s, 0x04030201);
  AppendLe64(&s, 0x0807060504030201ull);
  EXPECT_EQ(s, std::string("x\x01\x02\x03\x04\x01\x02\x03\x04\x05\x06\x07\x08", 13));
  EXPECT_EQ(LoadLe32(s.data() + 1), 0x04030201u);
}

TEST(LittleEndianTest, RegisterWindowsReadAndWritePartialAccesses) {
  uint8_t b[4] = {0xaa, 0xaa, 0xaa, 0xaa};
  // Bytes 1..2 of a 2-byte register holding 0x1234: byte 1, then past its end.
  ReadLeWindow(0x1234, 2, 1, b);
  EXPECT_EQ(b[0], 0x12);
  EXPECT_EQ(b[1], 0);
  const uint8_t w[2] = {0x56, 0x78};
  // Writing bytes 1..2 of a 2-byte register changes byte 1 only.
  EXPECT_EQ(WriteLeWindow(0x1234, 2, 1, w), 0x5634u);
  uint8_t v[8];
  StoreLe(0x0102030405060708ull, std::span<uint8_t>(v, 4));
  EXPECT_EQ(LoadLe(std::span<const uint8_t>(v, 4)), 0x05060708u);
}

}  // namespace
}  // namespace dsec
