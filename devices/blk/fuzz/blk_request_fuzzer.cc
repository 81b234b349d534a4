// SPDX-License-Identifier: Apache-2.0
// Fuzzes ParseBlkRequest: the input describes guest memory contents and a
// descriptor chain (non-empty buffers, as the queue guarantees; their
// addresses usually lie in guest memory as the queue checks, but some point
// anywhere, which the parser must survive too) plus the device limits.
#include <cstddef>
#include <cstdint>

#include "devices/blk/blk_request.h"
#include "devices/virtio/fuzz/fuzz_chain.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* memory =
      dsec::memory::FakeGuestMemory::Create({{0, dsec::virtio::fuzz::kFuzzMemSize}})
          .value()
          .release();
  dsec::virtio::fuzz::FuzzBytes in(data, size);

  dsec::devices::BlkLimits limits;
  limits.capacity_sectors = in.Take<uint64_t>();
  const uint8_t flags = in.Take<uint8_t>();
  limits.read_only = flags & 1;
  limits.discard = flags & 2;
  limits.write_zeroes = flags & 4;
  limits.seg_max = in.Take<uint8_t>();
  limits.max_discard_sectors = in.Take<uint32_t>();
  limits.max_discard_seg = in.Take<uint8_t>();
  limits.max_write_zeroes_sectors = in.Take<uint32_t>();
  limits.max_write_zeroes_seg = in.Take<uint8_t>();

  dsec::virtio::DescriptorChain chain = dsec::virtio::fuzz::TakeChain(in, *memory);

  absl::StatusOr<dsec::devices::BlkRequest> req =
      dsec::devices::ParseBlkRequest(*memory, chain, limits);
  if (req.ok() && req->status == dsec::devices::kBlkStatusOk) {
    // Invariants of an accepted request.
    if (req->type == dsec::devices::BlkRequestType::kIn ||
        req->type == dsec::devices::BlkRequestType::kOut) {
      if (req->data_len % 512 != 0) __builtin_trap();
      if (req->sector > limits.capacity_sectors ||
          (req->data_len >> 9) > limits.capacity_sectors - req->sector)
        __builtin_trap();
    }
    for (const auto& seg : req->segments) {
      if (seg.sector > limits.capacity_sectors ||
          seg.num_sectors > limits.capacity_sectors - seg.sector)
        __builtin_trap();
    }
    (void)dsec::devices::GuestRangesToIovecs(*memory, req->data);
  }
  return 0;
}
