// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the split virtqueue: arbitrary guest memory contents
// and queue configuration, then a Pop/AddUsed/NeedsInterrupt loop as a device
// would run it. Must never crash, read or write out of bounds, or hang.
//
// Input layout: [0] log2 queue size (mod 9), [1] feature bits (EVENT_IDX,
// INDIRECT_DESC), [2..3] desc offset, [4..5] avail offset, [6..7] used
// offset (all within the 64 KiB of RAM, sometimes misaligned), [8..] RAM
// contents (repeated to fill it).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "devices/virtio/descriptor_chain.h"
#include "devices/virtio/queue.h"
#include "devices/virtio/virtio_device.h"
#include "platform/memory/fake_guest_memory.h"

namespace {

constexpr uint64_t kRamBase = 0x1000;
constexpr uint64_t kRamSize = 64 * 1024;

uint16_t Le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dsec;
  if (size < 8) return 0;
  static auto* mem = memory::FakeGuestMemory::Create({{kRamBase, kRamSize}}).value().release();
  std::vector<uint8_t> ram(kRamSize);
  size_t body = size - 8;
  for (uint64_t i = 0; i < kRamSize; ++i) ram[i] = body == 0 ? 0 : data[8 + i % body];
  if (!mem->Write(kRamBase, ram).ok()) return 0;

  uint16_t queue_size = static_cast<uint16_t>(1u << (data[0] % 9));
  uint64_t features = 0;
  if (data[1] & 1) features |= virtio::kFeatureRingEventIdx;
  if (data[1] & 2) features |= virtio::kFeatureRingIndirectDesc;
  virtio::Queue queue(256);
  queue.set_size(queue_size);
  // Offsets may point past RAM (kRamBase + 64 KiB - 1 + ring size) too.
  queue.set_desc_addr(kRamBase + Le16(data + 2));
  queue.set_avail_addr(kRamBase + Le16(data + 4));
  queue.set_used_addr(kRamBase + Le16(data + 6));
  queue.set_ready(true);
  if (!queue.Activate(*mem, features).ok()) return 0;

  // A device loop. The guest cannot make more than 65536 entries appear,
  // and the queue refuses jumps larger than its size, so this ends; the
  // cap only bounds the fuzzer's time per input.
  for (int i = 0; i < 4 * 256 + 8; ++i) {
    auto chain = queue.Pop();
    if (!chain.ok()) break;
    if (!chain->has_value()) break;
    const virtio::DescriptorChain& c = **chain;
    virtio::ChainReader reader(*mem, c);
    uint8_t buf[64];
    (void)reader.Read(std::span<uint8_t>(buf, std::min<uint64_t>(sizeof(buf), reader.Remaining())));
    virtio::ChainWriter writer(*mem, c);
    std::memset(buf, 0x5a, sizeof(buf));
    (void)writer.Write(
        std::span<const uint8_t>(buf, std::min<uint64_t>(sizeof(buf), writer.Remaining())));
    if (i % 3 == 2) {
      queue.UndoPop();
      auto again = queue.Pop();
      if (!again.ok() || !again->has_value()) break;
    }
    if (!queue.AddUsed(c.head, static_cast<uint32_t>(writer.written())).ok()) break;
    (void)queue.NeedsInterrupt();
  }
  return 0;
}
