// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/status/statusor.h"

namespace dsec {

// Owns one mmap(2) mapping and unmaps it on destruction. Move-only.
class Mmap {
 public:
  // Anonymous private mapping (MAP_PRIVATE | MAP_ANONYMOUS | extra_flags).
  static absl::StatusOr<Mmap> Anonymous(size_t size, int prot = PROT_READ | PROT_WRITE,
                                        int extra_flags = 0);
  // Maps `size` bytes of `fd` at `offset`.
  static absl::StatusOr<Mmap> File(int fd, size_t size, int prot, int flags,
                                   uint64_t offset = 0);

  Mmap() = default;
  ~Mmap() { Reset(); }
  Mmap(Mmap&& other) noexcept
      : addr_(std::exchange(other.addr_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  Mmap& operator=(Mmap&& other) noexcept {
    if (this != &other) {
      Reset();
      addr_ = std::exchange(other.addr_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  Mmap(const Mmap&) = delete;
  Mmap& operator=(const Mmap&) = delete;

  uint8_t* data() const { return static_cast<uint8_t*>(addr_); }
  size_t size() const { return size_; }
  bool valid() const { return addr_ != nullptr; }

  // madvise(2) over [offset, offset+length) of this mapping.
  absl::Status Advise(size_t offset, size_t length, int advice) const;

  void Reset();

 private:
  Mmap(void* addr, size_t size) : addr_(addr), size_(size) {}
  void* addr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace dsec
