// SPDX-License-Identifier: Apache-2.0
#include "pmem-dax/readonly_write_sink.h"

#include <cstring>

#include "base/logging.h"

namespace dsec::pmem {

void ReadOnlyWriteSink::Read(uint64_t offset, std::span<uint8_t> data) {
  // Guest-controlled: offset (the bus guarantees offset + size <= size_).
  if (offset > size_ || data.size() > size_ - offset) {
    std::memset(data.data(), 0xff, data.size());
    return;
  }
  std::memcpy(data.data(), host_ + offset, data.size());
}

void ReadOnlyWriteSink::Write(uint64_t offset, std::span<const uint8_t> data) {
  // Guest-controlled: offset and data; nothing is written anywhere.
  const uint64_t n = writes_.fetch_add(1, std::memory_order_relaxed) + 1;
  bytes_.fetch_add(data.size(), std::memory_order_relaxed);
  DSEC_LOG_RATELIMITED(warn, 1, "device={} refused guest write to read-only layer offset={:#x} "
                       "len={} refused_total={}", name_, offset, data.size(), n);
}

}  // namespace dsec::pmem
