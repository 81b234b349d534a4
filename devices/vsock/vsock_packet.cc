// SPDX-License-Identifier: Apache-2.0
#include "devices/vsock/vsock_packet.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace dsec::devices {

const char* VsockOpName(VsockOp op) {
  switch (op) {
    case VsockOp::kInvalid:
      return "INVALID";
    case VsockOp::kRequest:
      return "REQUEST";
    case VsockOp::kResponse:
      return "RESPONSE";
    case VsockOp::kRst:
      return "RST";
    case VsockOp::kShutdown:
      return "SHUTDOWN";
    case VsockOp::kRw:
      return "RW";
    case VsockOp::kCreditUpdate:
      return "CREDIT_UPDATE";
    case VsockOp::kCreditRequest:
      return "CREDIT_REQUEST";
  }
  return "UNKNOWN";
}

VsockWireHeader EncodeVsockHeader(const VsockHeader& hdr) {
  VsockWireHeader w;
  w.src_cid = hdr.src_cid;
  w.dst_cid = hdr.dst_cid;
  w.src_port = hdr.src_port;
  w.dst_port = hdr.dst_port;
  w.len = hdr.len;
  w.type = hdr.type;
  w.op = static_cast<uint16_t>(hdr.op);
  w.flags = hdr.flags;
  w.buf_alloc = hdr.buf_alloc;
  w.fwd_cnt = hdr.fwd_cnt;
  return w;
}

VsockHeader DecodeVsockHeader(const VsockWireHeader& w) {
  VsockHeader h;
  h.src_cid = w.src_cid;
  h.dst_cid = w.dst_cid;
  h.src_port = w.src_port;
  h.dst_port = w.dst_port;
  h.len = w.len;
  h.type = w.type;
  h.op = static_cast<VsockOp>(w.op);
  h.flags = w.flags;
  h.buf_alloc = w.buf_alloc;
  h.fwd_cnt = w.fwd_cnt;
  return h;
}

absl::Status ValidateTxHeader(const VsockHeader& hdr, uint64_t guest_cid,
                              uint64_t payload_present) {
  // Guest-controlled: every field; checked here before any use.
  if (hdr.type != kVsockTypeStream) {
    return absl::InvalidArgumentError(absl::StrFormat("vsock: unsupported type %d", hdr.type));
  }
  const uint16_t op = static_cast<uint16_t>(hdr.op);
  if (op < static_cast<uint16_t>(VsockOp::kRequest) ||
      op > static_cast<uint16_t>(VsockOp::kCreditRequest)) {
    return absl::InvalidArgumentError(absl::StrFormat("vsock: unknown op %d", op));
  }
  if (hdr.src_cid != guest_cid) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vsock: src_cid %d is not the guest's cid %d", hdr.src_cid, guest_cid));
  }
  if (hdr.dst_cid != kVsockHostCid) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vsock: dst_cid %d is not the host", hdr.dst_cid));
  }
  if (hdr.len > kVsockMaxPayload) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vsock: len %d exceeds the maximum %d", hdr.len, kVsockMaxPayload));
  }
  if (hdr.len > payload_present) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "vsock: len %d but only %d payload bytes in the chain", hdr.len, payload_present));
  }
  if (hdr.op != VsockOp::kRw && hdr.len != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vsock: op %s carries %d payload bytes", VsockOpName(hdr.op), hdr.len));
  }
  return absl::OkStatus();
}

VsockTxParse ParseTxChain(const memory::GuestMemory& memory, const virtio::DescriptorChain& chain,
                          uint64_t guest_cid) {
  VsockTxParse out;
  virtio::ChainReader reader(memory, chain);
  // virtio 1.2 section 5.10.6.2: the driver places the header, then the
  // payload, in device-readable buffers.
  absl::StatusOr<VsockWireHeader> wire = reader.ReadObj<VsockWireHeader>();
  if (!wire.ok()) {
    out.status = wire.status();
    return out;
  }
  out.header_read = true;
  out.packet.hdr = DecodeVsockHeader(*wire);
  out.status = ValidateTxHeader(out.packet.hdr, guest_cid, reader.Remaining());
  if (!out.status.ok()) return out;
  // Guest-controlled: len was checked against kVsockMaxPayload and the bytes
  // present, so this allocation is bounded.
  out.packet.payload.resize(out.packet.hdr.len);
  out.status = reader.Read(out.packet.payload);
  if (!out.status.ok()) out.packet.payload.clear();
  return out;
}

absl::StatusOr<uint32_t> WriteRxChain(const memory::GuestMemory& memory,
                                      const virtio::DescriptorChain& chain,
                                      const VsockHeader& hdr, std::span<const uint8_t> payload) {
  if (payload.size() > kVsockMaxPayload) {
    return absl::InvalidArgumentError("vsock: rx payload exceeds the maximum packet size");
  }
  // Guest-controlled: the writable size of the chain.
  const uint64_t need = kVsockHeaderSize + payload.size();
  if (chain.WritableBytes() < need) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "vsock: rx chain holds %d bytes, packet needs %d", chain.WritableBytes(), need));
  }
  VsockHeader h = hdr;
  h.len = static_cast<uint32_t>(payload.size());
  const VsockWireHeader wire = EncodeVsockHeader(h);
  // Write header and payload in one call so that a bad buffer address writes
  // nothing at all.
  std::vector<uint8_t> bytes(need);
  std::memcpy(bytes.data(), &wire, kVsockHeaderSize);
  if (!payload.empty()) std::memcpy(bytes.data() + kVsockHeaderSize, payload.data(), payload.size());
  virtio::ChainWriter writer(memory, chain);
  absl::Status s = writer.Write(bytes);
  if (!s.ok()) return s;
  return static_cast<uint32_t>(writer.written());
}

std::string DescribeVsockHeader(const VsockHeader& h) {
  return absl::StrFormat("op=%s src=%d:%d dst=%d:%d len=%d type=%d flags=%#x buf_alloc=%d fwd_cnt=%d",
                         VsockOpName(h.op), h.src_cid, h.src_port, h.dst_cid, h.dst_port, h.len,
                         h.type, h.flags, h.buf_alloc, h.fwd_cnt);
}

}  // namespace dsec::devices
