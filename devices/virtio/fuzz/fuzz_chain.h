// SPDX-License-Identifier: Apache-2.0
// Shared by request-parser fuzzers: turns fuzzer bytes into guest memory
// contents and a descriptor chain shaped the way Queue::Pop hands them out
// (non-empty buffers, readable before writable), with addresses that mostly
// lie inside guest memory and sometimes not, which parsers must survive.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "devices/virtio/descriptor_chain.h"
#include "platform/memory/fake_guest_memory.h"

namespace dsec::virtio::fuzz {

inline constexpr uint64_t kFuzzMemSize = 64 * 1024;

class FuzzBytes {
 public:
  FuzzBytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
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

// Up to 7 readable and 7 writable non-empty buffers from `in` (the queue
// drops zero-length descriptors); an address selector with its top bit set
// points outside guest memory, the rest lie inside it as the queue checks.
// Then the remaining input fills guest memory from address 0.
inline DescriptorChain TakeChain(FuzzBytes& in, const memory::GuestMemory& mem) {
  DescriptorChain chain;
  const uint8_t readable = in.Take<uint8_t>() % 8;
  const uint8_t writable = in.Take<uint8_t>() % 8;
  for (int i = 0; i < readable + writable; ++i) {
    const uint32_t sel = in.Take<uint32_t>();
    const uint16_t len = std::max<uint16_t>(in.Take<uint16_t>(), 1);
    const uint64_t gpa =
        (sel & 0x80000000u) ? (static_cast<uint64_t>(sel) << 20) : sel % kFuzzMemSize;
    (i < readable ? chain.readable : chain.writable).push_back({gpa, len});
  }
  const size_t n = std::min<size_t>(in.size(), kFuzzMemSize);
  (void)mem.Write(0, std::span<const uint8_t>(in.data(), n));
  return chain;
}

}  // namespace dsec::virtio::fuzz
