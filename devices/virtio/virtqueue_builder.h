// SPDX-License-Identifier: Apache-2.0
// Test helper (target dsec_virtio_testing): plays the driver side of a split
// virtqueue (virtio 1.2 section 2.7) in guest memory, so that queue and
// device tests can add chains, kick, and read back used entries without a
// guest. It writes whatever it is told, including malformed rings.
//
// Layout inside [base, base + area): descriptor table at base, available
// ring right after it, used ring at the next 4 KiB boundary, then a data
// area from which AddChain() allocates buffers.
//
// Example (device test):
//   auto mem = memory::FakeGuestMemory::Create({{0, 1 << 20}}).value();
//   VirtQueueBuilder vq(*mem, /*base=*/0x1000, /*size=*/16);
//   Queue queue = vq.MakeQueue();                  // configured + active
//   auto chain = vq.AddChain({{0x01, 0x02}}, {512}); // 2 readable bytes, 512 writable
//   ... run the device ...
//   ASSERT_EQ(vq.used_idx(), 1);
//   EXPECT_EQ(vq.used(0).id, chain.head);
//   std::vector<uint8_t> out = vq.ReadBytes(chain.writable[0].gpa, 512);
//
// Threads: single-threaded test code. Misuse (a buffer larger than the data
// area, a chain longer than the queue) aborts via DSEC_CHECK. Descriptors are
// handed out round-robin, so at most size() descriptors may be outstanding.
#pragma once

#include <cstdint>
#include <vector>

#include "devices/virtio/descriptor_chain.h"
#include "devices/virtio/queue.h"
#include "platform/memory/guest_memory.h"

namespace dsec::virtio {

class VirtQueueBuilder {
 public:
  // `memory` must cover [base, base + area_bytes) and outlive the builder.
  VirtQueueBuilder(const memory::GuestMemory& memory, uint64_t base, uint16_t size,
                   uint64_t area_bytes = 256 * 1024);

  uint16_t size() const { return size_; }
  uint64_t desc_addr() const { return desc_addr_; }
  uint64_t avail_addr() const { return avail_addr_; }
  uint64_t used_addr() const { return used_addr_; }

  // Points `queue` at these rings (size, addresses, ready) without
  // activating it (what a transport does from the driver's register writes).
  void Configure(Queue& queue) const;
  // A queue of max size size(), configured and activated with `features`
  // (e.g. kFeatureRingEventIdx | kFeatureRingIndirectDesc). Aborts on error.
  Queue MakeQueue(uint64_t features = 0) const;

  struct AddedChain {
    uint16_t head = 0;
    std::vector<GuestBuffer> readable;
    std::vector<GuestBuffer> writable;
  };
  // Allocates buffers in the data area (readable ones filled with the given
  // bytes, writable ones zeroed), writes a chain of direct descriptors for
  // them and makes it available (avail ring entry + idx).
  AddedChain AddChain(const std::vector<std::vector<uint8_t>>& readable,
                      const std::vector<uint32_t>& writable_lens);
  // Same, but with one direct descriptor pointing at an indirect table
  // (section 2.7.5.3) holding the buffers.
  AddedChain AddIndirectChain(const std::vector<std::vector<uint8_t>>& readable,
                              const std::vector<uint32_t>& writable_lens);

  // --- Raw driver operations, for malformed-ring tests -----------------
  // Writes descriptor `index` of the table.
  void SetDesc(uint16_t index, const VirtqDesc& desc);
  // Writes `descs` at `gpa` (e.g. an indirect table in the data area).
  void WriteTable(uint64_t gpa, const std::vector<VirtqDesc>& descs);
  // avail->ring[avail_idx % size] = head; avail_idx++ (published).
  void PushAvail(uint16_t head);
  void SetAvailIdx(uint16_t idx);
  uint16_t avail_idx() const;
  void SetAvailFlags(uint16_t flags);
  // VIRTIO_F_EVENT_IDX: the driver's used_event (avail->ring[size]).
  void SetUsedEvent(uint16_t value);
  // Allocates `len` bytes (aligned) from the data area. Once the area is
  // exhausted allocation wraps to its start (older buffers are reused, fine
  // for tests that consume chains as they add them).
  uint64_t Alloc(uint64_t len, uint64_t align = 16);

  // --- Reading what the device did ---------------------------------------
  uint16_t used_idx() const;
  uint16_t used_flags() const;
  // used->ring[i % size].
  VirtqUsedElem used(uint16_t i) const;
  // VIRTIO_F_EVENT_IDX: the device's avail_event (used->ring[size]).
  uint16_t avail_event() const;
  std::vector<uint8_t> ReadBytes(uint64_t gpa, uint64_t len) const;
  void WriteBytes(uint64_t gpa, const std::vector<uint8_t>& bytes) const;

 private:
  uint16_t AllocDesc();
  std::vector<VirtqDesc> BufferDescs(const std::vector<std::vector<uint8_t>>& readable,
                                     const std::vector<uint32_t>& writable_lens, AddedChain& added);

  const memory::GuestMemory& memory_;
  uint16_t size_;
  uint64_t desc_addr_;
  uint64_t avail_addr_;
  uint64_t used_addr_;
  uint64_t data_start_;
  uint64_t data_next_;
  uint64_t data_end_;
  uint16_t next_desc_ = 0;  // descriptors are handed out round-robin
};

}  // namespace dsec::virtio
