// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dsec::devices {

// An Ethernet MAC address, first octet first (as in virtio_net_config.mac,
// virtio 1.2 section 5.1.4).
using MacAddress = std::array<uint8_t, 6>;

// A locally administered unicast address (first octet xxxxxx10) derived
// from `seed` with a 64-bit mixer, so that the same seed (e.g. a sandbox id
// hash) always yields the same address and different seeds rarely collide.
MacAddress DeriveMac(uint64_t seed);

// "02:00:5e:10:00:01" (six hex octets separated by ':' or '-'). A multicast
// address (low bit of the first octet set) or all zeros is InvalidArgument:
// neither can be a NIC's own address.
absl::StatusOr<MacAddress> ParseMac(absl::string_view text);

// Lower-case, ':'-separated.
std::string FormatMac(const MacAddress& mac);

// True for an address a NIC may own: not multicast/broadcast, not all zeros.
bool IsUnicastMac(const MacAddress& mac);

}  // namespace dsec::devices
