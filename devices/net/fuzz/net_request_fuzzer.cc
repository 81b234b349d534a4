// SPDX-License-Identifier: Apache-2.0
// Fuzzes the virtio-net header rules with guest-shaped input: a policy, a
// descriptor layout and the bytes of guest memory, plus an RX header from a
// backend that might misbehave.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "devices/net/net_request.h"
#include "base/status.h"
#include "platform/memory/fake_guest_memory.h"

namespace {

constexpr uint64_t kMemSize = 0x30000;

struct Input {
  const uint8_t* data;
  size_t size;
  uint8_t Byte() {
    if (size == 0) return 0;
    uint8_t b = *data++;
    --size;
    return b;
  }
  uint32_t U32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | Byte();
    return v;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dsec::devices;
  static auto* mem = [] {
    auto m = dsec::memory::FakeGuestMemory::Create({{0, kMemSize}});
    DSEC_CHECK(m.ok());
    return m->release();
  }();
  Input in{data, size};
  uint8_t policy_bits = in.Byte();
  TxPolicy policy;
  policy.offloads = {.csum = (policy_bits & 1) != 0,
                     .tso4 = (policy_bits & 2) != 0,
                     .tso6 = (policy_bits & 4) != 0};
  if (policy_bits & 8) policy.max_plain_frame_len = 1500 + kMaxL2HeaderLen;

  dsec::virtio::DescriptorChain chain;
  uint8_t ndesc = in.Byte() % 8;
  for (uint8_t i = 0; i < ndesc; ++i) {
    // Guest-shaped buffers as Queue::Pop hands them out: inside memory and
    // never empty (the queue drops zero-length descriptors).
    uint64_t gpa = in.U32() % kMemSize;
    uint32_t len = in.U32() % static_cast<uint32_t>(kMemSize - gpa + 1);
    bool writable = in.Byte() & 1;
    if (len == 0) continue;
    (writable ? chain.writable : chain.readable).push_back({gpa, len});
  }
  VirtioNetHdr rx_hdr;
  for (size_t i = 0; i < sizeof(rx_hdr); ++i) reinterpret_cast<uint8_t*>(&rx_hdr)[i] = in.Byte();
  uint32_t rx_len = in.U32() % (kMaxFrameLen + 2);
  // The rest fills guest memory at a fuzzer-chosen offset.
  uint64_t at = in.U32() % kMemSize;
  size_t n = in.size < kMemSize - at ? in.size : kMemSize - at;
  (void)mem->Write(at, std::span<const uint8_t>(in.data, n));

  auto tx = ParseTxChain(*mem, chain, policy);
  if (tx.ok()) {
    uint64_t total = 0;
    for (const auto& b : tx->frame) total += b.len;
    DSEC_CHECK(total == tx->frame_len);
    DSEC_CHECK(tx->frame_len >= kMinFrameLen && tx->frame_len <= kMaxFrameLen);
    DSEC_CHECK(ValidateTxHeader(tx->hdr, tx->frame_len, policy).ok());
  }
  auto rx = BuildRxHeader(rx_hdr, rx_len, policy.offloads);
  if (rx.ok()) {
    DSEC_CHECK(rx->num_buffers == 1);
    if (!policy.offloads.csum) DSEC_CHECK(rx->flags == 0);
  }
  return 0;
}
