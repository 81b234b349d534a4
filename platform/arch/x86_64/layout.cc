// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/layout.h"

#include "absl/strings/str_format.h"

namespace dsec::arch {

absl::StatusOr<std::vector<AddressRange>> RamRanges(uint64_t mem_bytes) {
  if (mem_bytes % kPageSize != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("guest memory size %d is not a multiple of 4 KiB", mem_bytes));
  }
  if (mem_bytes < kMinRamBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "guest memory size %d is below the minimum of %d bytes (16 MiB)", mem_bytes,
        kMinRamBytes));
  }
  if (mem_bytes > UINT64_MAX - kHighRamStart) {
    return absl::InvalidArgumentError(
        absl::StrFormat("guest memory size %d overflows the address space", mem_bytes));
  }
  std::vector<AddressRange> ranges;
  if (mem_bytes <= kMmioHoleStart) {
    ranges.push_back({0, mem_bytes});
  } else {
    ranges.push_back({0, kMmioHoleStart});
    ranges.push_back({kHighRamStart, mem_bytes - kMmioHoleStart});
  }
  return ranges;
}

}  // namespace dsec::arch
