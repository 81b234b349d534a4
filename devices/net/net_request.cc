// SPDX-License-Identifier: Apache-2.0
#include "devices/net/net_request.h"

#include "absl/strings/str_format.h"

namespace dsec::devices {

namespace {

absl::Status Invalid(const char* rule) {
  return absl::InvalidArgumentError(absl::StrFormat("virtio-net header: %s", rule));
}

// The checksum the driver or backend left to the other side must lie inside
// the frame (virtio 1.2 section 5.1.6.2: csum_start + csum_offset + 2 bytes).
absl::Status CheckCsumRange(const VirtioNetHdr& hdr, uint32_t frame_len) {
  uint32_t end = uint32_t{hdr.csum_start} + uint32_t{hdr.csum_offset} + 2;
  if (end > frame_len) return Invalid("checksum field lies outside the frame");
  return absl::OkStatus();
}

// GSO rules shared by both directions (sections 5.1.6.2.1 and 5.1.6.4.1).
// The driver must mark a segmented packet NEEDS_CSUM; the host stack may
// hand over a segmented packet whose checksums are already valid instead.
absl::Status CheckGso(const VirtioNetHdr& hdr, uint32_t frame_len, const NetOffloads& offloads,
                      bool require_needs_csum) {
  if (hdr.gso_type & kNetHdrGsoEcn) return Invalid("GSO ECN was not negotiated");
  switch (hdr.gso_type) {
    case kNetHdrGsoNone:
      return absl::OkStatus();
    case kNetHdrGsoTcpV4:
      if (!offloads.tso4) return Invalid("TCPv4 segmentation was not negotiated");
      break;
    case kNetHdrGsoTcpV6:
      if (!offloads.tso6) return Invalid("TCPv6 segmentation was not negotiated");
      break;
    case kNetHdrGsoUdp:
      return Invalid("UDP fragmentation offload is not offered");
    default:
      return Invalid("unknown gso_type");
  }
  if (require_needs_csum && !(hdr.flags & kNetHdrFNeedsCsum)) {
    return Invalid("GSO without NEEDS_CSUM");
  }
  if (hdr.gso_size == 0) return Invalid("GSO with gso_size 0");
  if (hdr.hdr_len > frame_len) return Invalid("hdr_len exceeds the frame");
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTxHeader(const VirtioNetHdr& hdr, uint32_t frame_len,
                              const TxPolicy& policy) {
  // Guest-controlled: every field of hdr and frame_len.
  if (frame_len < kMinFrameLen) return Invalid("frame shorter than an Ethernet header");
  if (frame_len > kMaxFrameLen) return Invalid("frame longer than 65550 bytes");
  // Section 5.1.6.2.1: the driver MUST NOT set DATA_VALID or RSC_INFO.
  constexpr uint8_t kTxFlags = kNetHdrFNeedsCsum;
  if (hdr.flags & ~kTxFlags) return Invalid("flags other than NEEDS_CSUM on transmit");
  if (hdr.flags & kNetHdrFNeedsCsum) {
    if (!policy.offloads.csum) return Invalid("NEEDS_CSUM without VIRTIO_NET_F_CSUM");
    absl::Status s = CheckCsumRange(hdr, frame_len);
    if (!s.ok()) return s;
  }
  absl::Status s = CheckGso(hdr, frame_len, policy.offloads, /*require_needs_csum=*/true);
  if (!s.ok()) return s;
  if (hdr.gso_type == kNetHdrGsoNone && frame_len > policy.max_plain_frame_len) {
    return Invalid("non-GSO frame exceeds the MTU");
  }
  // hdr_len is only a hint for plain frames, but the tap refuses a frame
  // whose hdr_len exceeds it, so refuse it here with a clear reason.
  if (hdr.hdr_len > frame_len) return Invalid("hdr_len exceeds the frame");
  return absl::OkStatus();
}

absl::StatusOr<TxFrame> ParseTxChain(const memory::GuestMemory& memory,
                                     const virtio::DescriptorChain& chain,
                                     const TxPolicy& policy) {
  if (!chain.writable.empty()) {
    return absl::InvalidArgumentError("virtio-net transmit chain has device-writable buffers");
  }
  virtio::ChainReader reader(memory, chain);
  TxFrame out;
  // Copied once: validation and the backend use this copy, not guest memory.
  auto hdr = reader.ReadObj<VirtioNetHdr>();
  if (!hdr.ok()) return Invalid("transmit chain shorter than the 12-byte header");
  out.hdr = *hdr;
  // Section 5.1.6.2: num_buffers is meaningless on transmit; the device
  // ignores it.
  out.hdr.num_buffers = 0;
  // Guest-controlled: the remaining length; bounded before narrowing.
  uint64_t remaining = reader.Remaining();
  if (remaining > kMaxFrameLen) return Invalid("frame longer than 65550 bytes");
  out.frame_len = static_cast<uint32_t>(remaining);
  absl::Status s = ValidateTxHeader(out.hdr, out.frame_len, policy);
  if (!s.ok()) return s;
  out.frame = reader.TakeRanges(out.frame_len);
  return out;
}

absl::StatusOr<VirtioNetHdr> BuildRxHeader(const VirtioNetHdr& backend_hdr, uint32_t frame_len,
                                           const NetOffloads& guest_offloads) {
  if (frame_len < kMinFrameLen) return Invalid("received frame shorter than an Ethernet header");
  if (frame_len > kMaxFrameLen) return Invalid("received frame longer than 65550 bytes");
  VirtioNetHdr hdr = backend_hdr;
  // Section 5.1.6.4.1: without MRG_RXBUF the device sets num_buffers to 1.
  hdr.num_buffers = 1;
  hdr.flags &= kNetHdrFNeedsCsum | kNetHdrFDataValid;
  if (!guest_offloads.csum) {
    // Without GUEST_CSUM the device sets flags to zero and hands over a
    // fully checksummed packet; a partial one cannot be completed here.
    if (hdr.flags & kNetHdrFNeedsCsum) return Invalid("partial checksum without GUEST_CSUM");
    hdr.flags = 0;
  }
  if (hdr.flags & kNetHdrFNeedsCsum) {
    // NEEDS_CSUM and DATA_VALID together would tell the driver two things.
    hdr.flags &= ~kNetHdrFDataValid;
    absl::Status s = CheckCsumRange(hdr, frame_len);
    if (!s.ok()) return s;
  } else {
    hdr.csum_start = 0;
    hdr.csum_offset = 0;
  }
  absl::Status s = CheckGso(hdr, frame_len, guest_offloads, /*require_needs_csum=*/false);
  if (!s.ok()) return s;
  if (hdr.gso_type == kNetHdrGsoNone) {
    hdr.gso_size = 0;
  }
  return hdr;
}

}  // namespace dsec::devices
