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
#include "vmm/memory/fake_guest_memory.h"

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

// Up to 8 readable and 8 writable buffers from `in`; the rest of `in` fills
// guest memory from address 0.
inline DescriptorChain TakeChain(FuzzBytes& in, const memory::GuestMemory& mem) {
  DescriptorChain chain;
  const uint8_t counts = in.Take<uint8_t>();
  const int readable = counts & 7, writable = (counts >> 4) & 7;
  for (int i = 0; i < readable + writable; ++i) {
    uint32_t addr = in.Take<uint32_t>();
    uint16_t len = in.Take<uint16_t>();
    GuestBuffer b{addr % (kFuzzMemSize + 4096), static_cast<uint32_t>(len % 2048) + 1u};
    (i < readable ? chain.readable : chain.writable).push_back(b);
  }
  (void)mem.Write(0, std::span<const uint8_t>(in.data(),
                                              std::min<size_t>(in.size(), kFuzzMemSize)));
  return chain;
}

}  // namespace dsec::virtio::fuzz
