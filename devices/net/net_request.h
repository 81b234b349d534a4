// SPDX-License-Identifier: Apache-2.0
// Pure parsing and building of virtio-net packet headers (virtio 1.2 section
// 5.1.6). No I/O: the device feeds it descriptor chains and the headers the
// backend produced, and it says what may go to the host or to the guest.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "devices/virtio/descriptor_chain.h"
#include "platform/memory/guest_memory.h"

namespace dsec::devices {

// <linux/virtio_net.h> cannot be included from C++ (a field is named
// `class`), so the constants this device uses are spelled out here.

// Feature bits (virtio 1.2 section 5.1.3).
inline constexpr uint64_t kNetFCsum = 1ull << 0;       // VIRTIO_NET_F_CSUM
inline constexpr uint64_t kNetFGuestCsum = 1ull << 1;  // VIRTIO_NET_F_GUEST_CSUM
inline constexpr uint64_t kNetFMtu = 1ull << 3;        // VIRTIO_NET_F_MTU
inline constexpr uint64_t kNetFMac = 1ull << 5;        // VIRTIO_NET_F_MAC
inline constexpr uint64_t kNetFGuestTso4 = 1ull << 7;  // VIRTIO_NET_F_GUEST_TSO4
inline constexpr uint64_t kNetFGuestTso6 = 1ull << 8;  // VIRTIO_NET_F_GUEST_TSO6
inline constexpr uint64_t kNetFHostTso4 = 1ull << 11;  // VIRTIO_NET_F_HOST_TSO4
inline constexpr uint64_t kNetFHostTso6 = 1ull << 12;  // VIRTIO_NET_F_HOST_TSO6
inline constexpr uint64_t kNetFMrgRxbuf = 1ull << 15;  // VIRTIO_NET_F_MRG_RXBUF (not offered)
inline constexpr uint64_t kNetFStatus = 1ull << 16;    // VIRTIO_NET_F_STATUS

// Header flags and GSO types (virtio 1.2 section 5.1.6).
inline constexpr uint8_t kNetHdrFNeedsCsum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM
inline constexpr uint8_t kNetHdrFDataValid = 2;  // VIRTIO_NET_HDR_F_DATA_VALID
inline constexpr uint8_t kNetHdrFRscInfo = 4;    // VIRTIO_NET_HDR_F_RSC_INFO
inline constexpr uint8_t kNetHdrGsoNone = 0;     // VIRTIO_NET_HDR_GSO_NONE
inline constexpr uint8_t kNetHdrGsoTcpV4 = 1;    // VIRTIO_NET_HDR_GSO_TCPV4
inline constexpr uint8_t kNetHdrGsoUdp = 3;      // VIRTIO_NET_HDR_GSO_UDP
inline constexpr uint8_t kNetHdrGsoTcpV6 = 4;    // VIRTIO_NET_HDR_GSO_TCPV6
inline constexpr uint8_t kNetHdrGsoEcn = 0x80;   // VIRTIO_NET_HDR_GSO_ECN

// Config space status bit (virtio 1.2 section 5.1.4).
inline constexpr uint16_t kNetSLinkUp = 1;  // VIRTIO_NET_S_LINK_UP

// struct virtio_net_hdr as laid out when VIRTIO_F_VERSION_1 is negotiated
// (virtio 1.2 section 5.1.6): 12 bytes, num_buffers always present, every
// field little-endian (section 1.4). The host is x86-64, so the fields are
// used as native integers.
struct __attribute__((packed)) VirtioNetHdr {
  uint8_t flags = 0;     // VIRTIO_NET_HDR_F_*
  uint8_t gso_type = 0;  // VIRTIO_NET_HDR_GSO_*
  uint16_t hdr_len = 0;
  uint16_t gso_size = 0;
  uint16_t csum_start = 0;
  uint16_t csum_offset = 0;
  uint16_t num_buffers = 0;
};
static_assert(sizeof(VirtioNetHdr) == 12, "virtio 1.2 section 5.1.6: 12-byte header");
static_assert(offsetof(VirtioNetHdr, gso_size) == 4);
static_assert(offsetof(VirtioNetHdr, num_buffers) == 10);
static_assert(std::endian::native == std::endian::little,
              "virtio 1.x headers are little-endian; this code uses them natively");

inline constexpr uint32_t kVirtioNetHdrSize = sizeof(VirtioNetHdr);
// An Ethernet header (destination, source, EtherType) is the smallest frame.
inline constexpr uint32_t kMinFrameLen = 14;
// The largest frame a GSO packet may describe: a 64 KiB IP packet plus the
// Ethernet header (what Linux's virtio-net and tap accept).
inline constexpr uint32_t kMaxFrameLen = 65550;
// Ethernet header plus one 802.1Q tag: added to the MTU for plain frames.
inline constexpr uint32_t kMaxL2HeaderLen = 18;

// Checksum and segmentation offloads in one direction. For TX (guest to
// host) they are the negotiated VIRTIO_NET_F_CSUM / HOST_TSO4 / HOST_TSO6;
// for RX (host to guest) GUEST_CSUM / GUEST_TSO4 / GUEST_TSO6 (virtio 1.2
// section 5.1.3). UFO and ECN are never offered.
struct NetOffloads {
  bool csum = false;
  bool tso4 = false;
  bool tso6 = false;
  bool operator==(const NetOffloads&) const = default;
};

// What the device accepts from the driver's transmit queue.
struct TxPolicy {
  NetOffloads offloads;
  // Longest frame with gso_type NONE: MTU + kMaxL2HeaderLen when
  // VIRTIO_NET_F_MTU was negotiated (section 5.1.4.2), else kMaxFrameLen.
  uint32_t max_plain_frame_len = kMaxFrameLen;
};

// A validated transmit request: a private copy of the header (the guest may
// rewrite its own copy at any time) and the frame's guest ranges, for
// zero-copy writev.
struct TxFrame {
  VirtioNetHdr hdr;
  std::vector<virtio::GuestBuffer> frame;
  uint32_t frame_len = 0;
};

// Checks a transmit header against the frame length and the negotiated
// offloads (virtio 1.2 section 5.1.6.2 and 5.1.6.2.1). InvalidArgument names
// the first violated rule.
absl::Status ValidateTxHeader(const VirtioNetHdr& hdr, uint32_t frame_len, const TxPolicy& policy);

// Parses one transmitq chain: the header (which may span descriptors), then
// the frame. Chains with device-writable buffers are refused: transmit
// buffers are device-readable only (section 5.1.6.2).
absl::StatusOr<TxFrame> ParseTxChain(const memory::GuestMemory& memory,
                                     const virtio::DescriptorChain& chain,
                                     const TxPolicy& policy);

// Turns the header the backend produced for a received frame into the one
// the driver may see (virtio 1.2 section 5.1.6.4 and 5.1.6.4.1): num_buffers
// is 1 (no VIRTIO_NET_F_MRG_RXBUF), DATA_VALID survives only with GUEST_CSUM,
// and partial checksums or GSO the driver did not negotiate are refused
// (InvalidArgument: the frame is dropped, never handed over half-valid).
absl::StatusOr<VirtioNetHdr> BuildRxHeader(const VirtioNetHdr& backend_hdr, uint32_t frame_len,
                                           const NetOffloads& guest_offloads);

}  // namespace dsec::devices
