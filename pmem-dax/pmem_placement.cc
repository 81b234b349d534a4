// SPDX-License-Identifier: Apache-2.0
#include "pmem-dax/pmem_placement.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "pmem-dax/layer_mapping.h"

namespace dsec::pmem {

namespace {
uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }
}  // namespace

WindowPlacer::WindowPlacer(std::span<const arch::AddressRange> ram, uint64_t limit) : limit_(limit) {
  uint64_t low_end = 0;
  high_end_ = arch::kHighRamStart;
  for (const arch::AddressRange& r : ram) {
    if (r.end() <= arch::kMmioHoleStart) {
      low_end = std::max(low_end, r.end());
    } else {
      high_end_ = std::max(high_end_, r.end());
    }
  }
  cursor_ = AlignUp(low_end, kPmemAlignment);
}

absl::StatusOr<uint64_t> WindowPlacer::Place(uint64_t size) {
  if (size == 0 || size % kPmemAlignment != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pmem window %d: size %d is not a non-zero 2 MiB multiple", count_, size));
  }
  ++count_;
  total_ += size;
  if (!high_ && (size > arch::kMmioHoleStart || cursor_ > arch::kMmioHoleStart - size)) {
    high_ = true;
    cursor_ = AlignUp(high_end_, kPmemAlignment);
  }
  if (cursor_ > limit_ || size > limit_ - cursor_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "too many or too large pmem layers: %d layers of %d MiB in total do not fit in the "
        "guest address space below %d GiB",
        count_, total_ >> 20, limit_ >> 30));
  }
  const uint64_t start = cursor_;
  cursor_ += size;
  return start;
}

absl::StatusOr<std::vector<uint64_t>> PlacePmemRegions(std::span<const arch::AddressRange> ram,
                                                       std::span<const uint64_t> sizes,
                                                       uint64_t limit) {
  WindowPlacer placer(ram, limit);
  std::vector<uint64_t> starts;
  for (uint64_t size : sizes) {
    absl::StatusOr<uint64_t> start = placer.Place(size);
    if (!start.ok()) {
      if (absl::IsResourceExhausted(start.status())) {
        uint64_t total = 0;
        for (uint64_t s : sizes) total += s;
        return absl::ResourceExhaustedError(absl::StrFormat(
            "too many or too large pmem layers: %d layers of %d MiB in total do not fit in the "
            "guest address space below %d GiB",
            sizes.size(), total >> 20, limit >> 30));
      }
      return start.status();
    }
    starts.push_back(*start);
  }
  return starts;
}

}  // namespace dsec::pmem
