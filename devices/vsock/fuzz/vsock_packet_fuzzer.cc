// SPDX-License-Identifier: Apache-2.0
// Feeds arbitrary guest memory and descriptor layouts to the vsock tx parser
// and, for what parses, round-trips the packet through an rx chain.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "devices/vsock/vsock_packet.h"
#include "base/status.h"
#include "platform/memory/fake_guest_memory.h"

namespace {

constexpr uint64_t kMemSize = 0x30000;  // > header + 64 KiB payload
constexpr uint64_t kGuestCid = 3;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using dsec::devices::kVsockHeaderSize;
  static auto* mem = [] {
    auto m = dsec::memory::FakeGuestMemory::Create({{0, kMemSize}});
    DSEC_CHECK(m.ok());
    return m->release();
  }();
  if (size < 1) return 0;
  // First byte: number of buffers (1..8); then for each a 4-byte length
  // (taken modulo the memory size); the rest is the chain's bytes, laid out
  // back to back from gpa 0.
  const size_t nbuf = (data[0] % 8) + 1;
  size_t pos = 1;
  dsec::virtio::DescriptorChain chain;
  uint64_t gpa = 0;
  for (size_t i = 0; i < nbuf && pos + 4 <= size; ++i, pos += 4) {
    uint32_t len;
    std::memcpy(&len, data + pos, 4);
    len %= 0x12000;
    // Chains come from the queue, which guarantees in-bounds buffers and
    // drops zero-length descriptors; mirror that here.
    if (len == 0 || gpa + len > kMemSize) continue;
    chain.readable.push_back({gpa, len});
    gpa += len;
  }
  const size_t body = size - pos;
  DSEC_CHECK(mem->Fill(0, 0, kMemSize).ok());
  DSEC_CHECK(mem->Write(0, std::span(data + pos, std::min<size_t>(body, kMemSize))).ok());
  // Header fields that would fail validation most of the time are patched
  // in by half the inputs so that the payload path is reached.
  if (body >= kVsockHeaderSize && (data[0] & 0x80)) {
    dsec::devices::VsockWireHeader w;
    DSEC_CHECK(mem->Read(0, std::span(reinterpret_cast<uint8_t*>(&w), sizeof(w))).ok());
    w.src_cid = kGuestCid;
    w.dst_cid = dsec::devices::kVsockHostCid;
    w.type = dsec::devices::kVsockTypeStream;
    DSEC_CHECK(mem->WriteObj(0, w).ok());
  }
  dsec::devices::VsockTxParse r = dsec::devices::ParseTxChain(*mem, chain, kGuestCid);
  if (!r.status.ok()) return 0;
  DSEC_CHECK(r.packet.payload.size() == r.packet.hdr.len);
  DSEC_CHECK(r.packet.hdr.len <= dsec::devices::kVsockMaxPayload);
  dsec::virtio::DescriptorChain rx{0, {}, {{0x20000, 0x10000}}};
  auto written = dsec::devices::WriteRxChain(*mem, rx, r.packet.hdr, r.packet.payload);
  DSEC_CHECK(!written.ok() || *written == kVsockHeaderSize + r.packet.payload.size());
  return 0;
}
