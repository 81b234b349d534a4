// SPDX-License-Identifier: Apache-2.0
#include "pmem-dax/pmem_placement.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "pmem-dax/layer_mapping.h"

namespace dsec::pmem {

namespace {
uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }
}  // namespace

absl::StatusOr<std::vector<uint64_t>> PlacePmemRegions(std::span<const arch::AddressRange> ram,
                                                       std::span<const uint64_t> sizes,
                                                       uint64_t limit) {
  uint64_t low_end = 0;
  uint64_t high_end = arch::kHighRamStart;
  for (const arch::AddressRange& r : ram) {
    if (r.end() <= arch::kMmioHoleStart) {
      low_end = std::max(low_end, r.end());
    } else {
      high_end = std::max(high_end, r.end());
    }
  }
  uint64_t cursor = AlignUp(low_end, kPmemAlignment);
  bool high = false;
  std::vector<uint64_t> starts;
  uint64_t total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const uint64_t size = sizes[i];
    if (size == 0 || size % kPmemAlignment != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("pmem window %d: size %d is not a non-zero 2 MiB multiple", i, size));
    }
    total += size;
    if (!high && (size > arch::kMmioHoleStart || cursor > arch::kMmioHoleStart - size)) {
      high = true;
      cursor = AlignUp(high_end, kPmemAlignment);
    }
    if (cursor > limit || size > limit - cursor) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "too many or too large pmem layers: %d layers of %d MiB in total do not fit in the "
          "guest address space below %d GiB",
          sizes.size(), total >> 20, limit >> 30));
    }
    starts.push_back(cursor);
    cursor += size;
  }
  return starts;
}

}  // namespace dsec::pmem
