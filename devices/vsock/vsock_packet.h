// SPDX-License-Identifier: Apache-2.0
// virtio-vsock packets (virtio 1.2 section 5.10.6): the 44-byte little-endian
// header and its payload, parsed from a tx descriptor chain and serialised
// into an rx chain. Pure: no I/O, no state; fuzzed by fuzz/vsock_packet_fuzzer.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "devices/virtio/descriptor_chain.h"
#include "platform/memory/guest_memory.h"

namespace dsec::devices {

// virtio 1.2 section 5.10.4: CIDs 0 and 1 are reserved, 2 is the host.
inline constexpr uint64_t kVsockHostCid = 2;
inline constexpr uint64_t kVsockMinGuestCid = 3;
// The largest payload one packet may carry in either direction (the Linux
// driver's VIRTIO_VSOCK_MAX_PKT_BUF_SIZE); larger `len` values are refused.
inline constexpr uint32_t kVsockMaxPayload = 64 * 1024;

// virtio 1.2 section 5.10.6: struct virtio_vsock_hdr as laid out in guest
// memory. Fields are little-endian; x86-64 is little-endian, and the static
// asserts below pin the layout.
struct __attribute__((packed)) VsockWireHeader {
  uint64_t src_cid;
  uint64_t dst_cid;
  uint32_t src_port;
  uint32_t dst_port;
  uint32_t len;
  uint16_t type;
  uint16_t op;
  uint32_t flags;
  uint32_t buf_alloc;
  uint32_t fwd_cnt;
};
static_assert(sizeof(VsockWireHeader) == 44);
static_assert(offsetof(VsockWireHeader, len) == 24);
static_assert(offsetof(VsockWireHeader, type) == 28);
static_assert(offsetof(VsockWireHeader, op) == 30);
static_assert(offsetof(VsockWireHeader, fwd_cnt) == 40);
static_assert(std::endian::native == std::endian::little,
              "VsockWireHeader is used as little-endian wire format");
inline constexpr uint32_t kVsockHeaderSize = sizeof(VsockWireHeader);

// virtio 1.2 section 5.10.6: socket types; only streams are offered
// (VIRTIO_VSOCK_F_SEQPACKET is not negotiated).
inline constexpr uint16_t kVsockTypeStream = 1;

enum class VsockOp : uint16_t {
  kInvalid = 0,
  kRequest = 1,
  kResponse = 2,
  kRst = 3,
  kShutdown = 4,
  kRw = 5,
  kCreditUpdate = 6,
  kCreditRequest = 7,
};
const char* VsockOpName(VsockOp op);

// virtio 1.2 section 5.10.6.5: SHUTDOWN flags.
inline constexpr uint32_t kVsockShutdownRcv = 1;
inline constexpr uint32_t kVsockShutdownSend = 2;
inline constexpr uint32_t kVsockShutdownBoth = kVsockShutdownRcv | kVsockShutdownSend;

// A decoded header in host representation.
struct VsockHeader {
  uint64_t src_cid = 0;
  uint64_t dst_cid = 0;
  uint32_t src_port = 0;
  uint32_t dst_port = 0;
  uint32_t len = 0;
  uint16_t type = kVsockTypeStream;
  VsockOp op = VsockOp::kInvalid;
  uint32_t flags = 0;
  uint32_t buf_alloc = 0;
  uint32_t fwd_cnt = 0;

  bool operator==(const VsockHeader&) const = default;
};

// One packet: header plus (for RW only) payload, hdr.len == payload.size().
struct VsockPacket {
  VsockHeader hdr;
  std::vector<uint8_t> payload;
};

VsockWireHeader EncodeVsockHeader(const VsockHeader& hdr);
// Decodes without validating: op may be outside the enum's named values.
VsockHeader DecodeVsockHeader(const VsockWireHeader& wire);

// Checks a header the guest put on its tx queue (virtio 1.2 section 5.10.6):
// stream type, a known op, src_cid == guest_cid, dst_cid == host,
// len <= kVsockMaxPayload and <= payload_present (bytes after the header in
// the chain), and len == 0 for every op but RW. InvalidArgument otherwise.
absl::Status ValidateTxHeader(const VsockHeader& hdr, uint64_t guest_cid,
                              uint64_t payload_present);

// Result of parsing a tx chain. `header_read` tells a caller whether `packet.hdr`
// was read (so that it may answer an invalid packet with RST).
struct VsockTxParse {
  absl::Status status;
  bool header_read = false;
  VsockPacket packet;
};

// Reads the header and payload from the readable part of `chain`, validating
// as ValidateTxHeader does. Copies everything out of guest memory first.
VsockTxParse ParseTxChain(const memory::GuestMemory& memory, const virtio::DescriptorChain& chain,
                          uint64_t guest_cid);

// Writes header (with len = payload.size()) and payload into the writable part
// of an rx chain (virtio 1.2 section 5.10.6.1). Returns bytes written, or
// InvalidArgument if the chain is too small (nothing is written then).
absl::StatusOr<uint32_t> WriteRxChain(const memory::GuestMemory& memory,
                                      const virtio::DescriptorChain& chain,
                                      const VsockHeader& hdr, std::span<const uint8_t> payload);

// "op=RW src=3:1024 dst=2:52 len=5 ..." for logs and test failures.
std::string DescribeVsockHeader(const VsockHeader& hdr);

}  // namespace dsec::devices
