// SPDX-License-Identifier: Apache-2.0
// The contract between the virtqueue (the only code that walks rings) and the
// devices: a descriptor chain that the queue has already validated, and
// bounds-checked readers/writers over its buffers. Device request parsers
// (`<dev>_request.{h,cc}`) take a DescriptorChain and never see ring memory.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "platform/memory/guest_memory.h"

namespace dsec::virtio {

// One guest buffer of a chain. Guest-controlled: gpa and len were checked by
// the queue to lie inside guest memory, but the bytes behind them can change
// at any time (the guest owns them); copy out before validating.
struct GuestBuffer {
  uint64_t gpa = 0;
  uint32_t len = 0;
};

// A chain popped from a queue's available ring (virtio 1.2 section 2.7.4 and
// 2.7.5): the device-readable buffers, then the device-writable ones (the
// spec requires readable descriptors to precede writable ones; the queue
// refuses chains that interleave them).
struct DescriptorChain {
  uint16_t head = 0;  // descriptor index to hand back in the used ring
  std::vector<GuestBuffer> readable;
  std::vector<GuestBuffer> writable;

  uint64_t ReadableBytes() const;
  uint64_t WritableBytes() const;
};

// Sequential reads from the readable part of a chain.
class ChainReader {
 public:
  ChainReader(const memory::GuestMemory& memory, const DescriptorChain& chain)
      : memory_(memory), buffers_(chain.readable) {}

  // Copies exactly out.size() bytes or fails (InvalidArgument) without
  // consuming anything.
  absl::Status Read(std::span<uint8_t> out);
  template <typename T>
  absl::StatusOr<T> ReadObj() {
    T value;
    absl::Status s = Read(std::span<uint8_t>(reinterpret_cast<uint8_t*>(&value), sizeof(T)));
    if (!s.ok()) return s;
    return value;
  }
  // Skips n bytes (fails like Read if fewer remain).
  absl::Status Skip(uint64_t n);
  uint64_t Remaining() const;
  // The remaining bytes as guest ranges (for zero-copy I/O: readv/io_uring
  // from host pointers obtained with GuestMemory::HostAddress), consuming
  // at most `max` bytes.
  std::vector<GuestBuffer> TakeRanges(uint64_t max);

 private:
  const memory::GuestMemory& memory_;
  std::span<const GuestBuffer> buffers_;
  size_t index_ = 0;
  uint32_t offset_ = 0;  // within buffers_[index_]
};

// Sequential writes into the writable part of a chain; counts what was
// written (the length reported in the used ring).
class ChainWriter {
 public:
  ChainWriter(const memory::GuestMemory& memory, const DescriptorChain& chain)
      : memory_(memory), buffers_(chain.writable) {}

  // Writes exactly in.size() bytes or fails (InvalidArgument) without
  // writing anything.
  absl::Status Write(std::span<const uint8_t> in);
  template <typename T>
  absl::Status WriteObj(const T& value) {
    return Write(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&value), sizeof(T)));
  }
  absl::Status Skip(uint64_t n);
  uint64_t Remaining() const;
  uint64_t written() const { return written_; }
  std::vector<GuestBuffer> TakeRanges(uint64_t max);

 private:
  const memory::GuestMemory& memory_;
  std::span<const GuestBuffer> buffers_;
  size_t index_ = 0;
  uint32_t offset_ = 0;
  uint64_t written_ = 0;
};

}  // namespace dsec::virtio
