// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dsec::memory {

// One contiguous range of guest-physical memory backed by host memory.
struct GuestRegion {
  uint64_t gpa = 0;       // guest-physical start
  uint64_t size = 0;      // bytes
  uint8_t* host = nullptr;  // host virtual address of gpa
  uint64_t end() const { return gpa + size; }
};

// Guest-physical memory as the monitor sees it. Every access is bounds-checked
// against the regions (with overflow-safe arithmetic): a guest-controlled
// address that is outside RAM, or a range that runs past the end of a region,
// yields InvalidArgument, never a host access out of bounds.
//
// Threads: regions are fixed at construction and never change afterwards, so
// any thread may call any method. The bytes themselves are shared with a
// running guest; callers that parse guest structures copy them out first
// (ReadObj) and validate the copy.
class GuestMemory {
 public:
  virtual ~GuestMemory() = default;

  std::span<const GuestRegion> regions() const { return regions_; }
  uint64_t TotalSize() const;

  // Host pointer for [gpa, gpa+len) when the whole range lies in one region.
  // len == 0 is allowed for any gpa inside or at the end of a region.
  absl::StatusOr<uint8_t*> HostAddress(uint64_t gpa, uint64_t len) const;
  // The region containing gpa, or nullptr.
  const GuestRegion* FindRegion(uint64_t gpa) const;
  bool IsValidRange(uint64_t gpa, uint64_t len) const { return HostAddress(gpa, len).ok(); }

  // Copies that may span adjacent regions (a range crossing a hole fails).
  absl::Status Read(uint64_t gpa, std::span<uint8_t> out) const;
  absl::Status Write(uint64_t gpa, std::span<const uint8_t> in) const;
  absl::Status Fill(uint64_t gpa, uint8_t value, uint64_t len) const;

  template <typename T>
  absl::StatusOr<T> ReadObj(uint64_t gpa) const {
    static_assert(std::is_trivially_copyable_v<T>);
    T value;
    absl::Status s =
        Read(gpa, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&value), sizeof(T)));
    if (!s.ok()) return s;
    return value;
  }
  template <typename T>
  absl::Status WriteObj(uint64_t gpa, const T& value) const {
    static_assert(std::is_trivially_copyable_v<T>);
    return Write(gpa, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&value),
                                               sizeof(T)));
  }

 protected:
  GuestMemory() = default;
  // Regions must be sorted by gpa and must not overlap (checked by the
  // implementations' Create()).
  std::vector<GuestRegion> regions_;
};

// Checks that regions are non-empty, sorted, non-overlapping and do not wrap.
absl::Status ValidateRegionLayout(std::span<const GuestRegion> regions);

}  // namespace dsec::memory
