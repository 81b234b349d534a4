// SPDX-License-Identifier: Apache-2.0
#include "devices/net/mac_address.h"

#include "gtest/gtest.h"

namespace dsec::devices {
namespace {

TEST(MacAddressTest, DerivedAddressIsLocallyAdministeredUnicastAndStable) {
  for (uint64_t seed : {0ull, 1ull, 42ull, ~0ull}) {
    MacAddress mac = DeriveMac(seed);
    EXPECT_EQ(mac[0] & 0x03, 0x02) << FormatMac(mac);
    EXPECT_TRUE(IsUnicastMac(mac));
    EXPECT_EQ(DeriveMac(seed), mac);
  }
  EXPECT_NE(DeriveMac(1), DeriveMac(2));
}

TEST(MacAddressTest, ParsesColonAndDashSeparatedAddresses) {
  auto mac = ParseMac("02:Ab:cd:00:11:ff");
  ASSERT_TRUE(mac.ok()) << mac.status();
  EXPECT_EQ(*mac, (MacAddress{0x02, 0xab, 0xcd, 0x00, 0x11, 0xff}));
  EXPECT_EQ(FormatMac(*mac), "02:ab:cd:00:11:ff");
  EXPECT_TRUE(ParseMac("02-00-00-00-00-01").ok());
}

TEST(MacAddressTest, RejectsMalformedMulticastAndZeroAddresses) {
  for (const char* bad : {"", "02:00:00:00:00", "02:00:00:00:00:0g", "02:00:00:00:00:001",
                          "02.00.00.00.00.01", "01:00:5e:00:00:01", "ff:ff:ff:ff:ff:ff",
                          "00:00:00:00:00:00"}) {
    EXPECT_EQ(ParseMac(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace dsec::devices
