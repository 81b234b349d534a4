// SPDX-License-Identifier: Apache-2.0
// Fuzzes ParseBlkRequest: the input describes guest memory contents and a
// descriptor chain (non-empty buffers, as the queue guarantees; their
// addresses usually lie in guest memory as the queue checks, but some point
// anywhere, which the parser must survive too) plus the device limits.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <memory>
#include <span>

#include "devices/blk/blk_request.h"
#include "vmm/memory/fake_guest_memory.h"

namespace {

constexpr uint64_t kMemSize = 64 * 1024;

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T Take() {
    T value{};
    size_t n = std::min(sizeof(T), size_);
    std::memcpy(&value, data_, n);
    data_ += n;
    size_ -= n;
    return value;
  }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_;
  size_t size_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* memory = dsec::memory::FakeGuestMemory::Create({{0, kMemSize}}).value().release();
  Input in(data, size);

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

  dsec::virtio::DescriptorChain chain;
  const uint8_t readable = in.Take<uint8_t>() % 8;
  const uint8_t writable = in.Take<uint8_t>() % 8;
  for (int i = 0; i < readable + writable; ++i) {
    // Mostly in-memory buffers, as the queue guarantees; the top bit of the
    // address selector lets some point outside RAM.
    const uint32_t sel = in.Take<uint32_t>();
    // The queue never hands out zero-length buffers (it drops them).
    const uint16_t len = std::max<uint16_t>(in.Take<uint16_t>(), 1);
    uint64_t gpa = (sel & 0x80000000u) ? (static_cast<uint64_t>(sel) << 20) : sel % kMemSize;
    dsec::virtio::GuestBuffer b{gpa, len};
    (i < readable ? chain.readable : chain.writable).push_back(b);
  }
  // The rest of the input becomes guest memory contents.
  const size_t n = std::min<size_t>(in.size(), kMemSize);
  (void)memory->Write(0, std::span<const uint8_t>(in.data(), n));

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
