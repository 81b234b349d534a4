// SPDX-License-Identifier: Apache-2.0
// Where pmem windows go in the guest-physical address space.
//
// Rule: after guest RAM, 2 MiB aligned, in order. A window goes below the
// 32-bit MMIO hole (arch::kMmioHoleStart, 3 GiB) when it fits between the
// end of low RAM and the hole — there a guest with 4 GiB identity page
// tables (the test guest) reaches it without extra tables; otherwise (and
// every window after it) above 4 GiB and above any high RAM. Windows never
// overlap RAM or the hole (the virtio-mmio, test-device, IOAPIC and LAPIC
// ranges all lie inside it), and all must end below `limit` (the guest
// physical address width we promise to fit in).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "platform/arch/x86_64/layout.h"

namespace dsec::pmem {

// 1 TiB: within the 40 physical address bits of every x86-64 CPU KVM runs on.
inline constexpr uint64_t kPmemGpaLimit = 1ull << 40;

// Places windows one at a time by the rule above (what a VM does as its
// pmem devices are built). Threads: one owner.
class WindowPlacer {
 public:
  explicit WindowPlacer(std::span<const arch::AddressRange> ram, uint64_t limit = kPmemGpaLimit);
  // The next window's start. InvalidArgument for a size that is zero or not
  // 2 MiB aligned; ResourceExhausted when it does not fit below the limit.
  absl::StatusOr<uint64_t> Place(uint64_t size);

 private:
  uint64_t cursor_ = 0;
  uint64_t high_end_ = 0;
  uint64_t limit_ = 0;
  bool high_ = false;
  size_t count_ = 0;
  uint64_t total_ = 0;
};

// One start address per entry of `sizes` (each a non-zero 2 MiB multiple).
// ResourceExhausted when the windows do not all fit below `limit`;
// InvalidArgument for a size that is zero or not 2 MiB aligned.
absl::StatusOr<std::vector<uint64_t>> PlacePmemRegions(std::span<const arch::AddressRange> ram,
                                                       std::span<const uint64_t> sizes,
                                                       uint64_t limit = kPmemGpaLimit);

}  // namespace dsec::pmem
