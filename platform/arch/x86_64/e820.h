// SPDX-License-Identifier: Apache-2.0
// The BIOS e820 memory map the monitor reports to the guest, both in the zero
// page (Linux boot protocol, boot_params.e820_table) and as the PVH memmap.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "platform/arch/x86_64/layout.h"
#include "platform/memory/guest_memory.h"

namespace dsec::arch {

// ACPI "Address Range Types" as used by int 15h e820.
inline constexpr uint32_t kE820Ram = 1;
inline constexpr uint32_t kE820Reserved = 2;
// The zero page holds at most this many entries (E820_MAX_ENTRIES_ZEROPAGE).
inline constexpr size_t kMaxE820Entries = 128;

struct E820Entry {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint32_t type = 0;
  friend bool operator==(const E820Entry&, const E820Entry&) = default;
};

// Builds a sorted map without overlaps from RAM ranges and reserved ranges:
// reserved wins where the two overlap, adjacent entries of the same type are
// merged, zero-sized ranges are ignored. InvalidArgument if a range wraps the
// address space or the result exceeds kMaxE820Entries.
absl::StatusOr<std::vector<E820Entry>> BuildE820(std::span<const AddressRange> ram,
                                                 std::span<const AddressRange> reserved);

// The map for a guest: its RAM regions with the low reserved area
// (kLowReservedArea, EBDA/VGA/BIOS) carved out.
absl::StatusOr<std::vector<E820Entry>> GuestE820(const memory::GuestMemory& mem);

}  // namespace dsec::arch
