// SPDX-License-Identifier: Apache-2.0
#include "devices/net/mac_address.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dsec::devices {

namespace {

// splitmix64's finaliser: every input bit affects every output bit.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

MacAddress DeriveMac(uint64_t seed) {
  uint64_t x = Mix(seed);
  MacAddress mac;
  for (size_t i = 0; i < mac.size(); ++i) mac[i] = static_cast<uint8_t>(x >> (8 * i));
  // IEEE 802: bit 0 of the first octet is the group bit, bit 1 the
  // locally-administered bit.
  mac[0] = static_cast<uint8_t>((mac[0] & 0xfc) | 0x02);
  return mac;
}

bool IsUnicastMac(const MacAddress& mac) {
  if (mac[0] & 0x01) return false;
  for (uint8_t b : mac) {
    if (b != 0) return true;
  }
  return false;
}

absl::StatusOr<MacAddress> ParseMac(absl::string_view text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat("invalid MAC address '", text, "'"));
  };
  // Exactly "xx:xx:xx:xx:xx:xx": 17 characters.
  if (text.size() != 17) return bad();
  MacAddress mac;
  for (size_t i = 0; i < mac.size(); ++i) {
    size_t at = 3 * i;
    int hi = HexDigit(text[at]);
    int lo = HexDigit(text[at + 1]);
    if (hi < 0 || lo < 0) return bad();
    if (i + 1 < mac.size() && text[at + 2] != ':' && text[at + 2] != '-') return bad();
    mac[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  if (!IsUnicastMac(mac)) {
    return absl::InvalidArgumentError(
        absl::StrCat("MAC address '", text, "' is multicast or zero, not a unicast address"));
  }
  return mac;
}

std::string FormatMac(const MacAddress& mac) {
  return absl::StrFormat("%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3], mac[4],
                         mac[5]);
}

}  // namespace dsec::devices
