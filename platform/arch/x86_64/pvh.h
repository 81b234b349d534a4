// SPDX-License-Identifier: Apache-2.0
// PVH direct boot: the hvm_start_info block a PVH kernel receives in EBX.
// Layouts follow xen/include/public/arch-x86/hvm/start_info.h (version 1,
// which adds the memory map) and docs/misc/pvh.pandoc.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "absl/status/status.h"
#include "platform/arch/x86_64/e820.h"
#include "platform/arch/x86_64/layout.h"
#include "platform/memory/guest_memory.h"

namespace dsec::arch {

inline constexpr uint32_t kHvmStartMagic = 0x336ec578;
inline constexpr uint32_t kHvmStartInfoVersion = 1;

struct HvmStartInfo {
  uint32_t magic = kHvmStartMagic;
  uint32_t version = kHvmStartInfoVersion;
  uint32_t flags = 0;
  uint32_t nr_modules = 0;
  uint64_t modlist_paddr = 0;
  uint64_t cmdline_paddr = 0;
  uint64_t rsdp_paddr = 0;
  uint64_t memmap_paddr = 0;  // version >= 1
  uint32_t memmap_entries = 0;
  uint32_t reserved = 0;
};
static_assert(sizeof(HvmStartInfo) == 56);

struct HvmModlistEntry {
  uint64_t paddr = 0;
  uint64_t size = 0;
  uint64_t cmdline_paddr = 0;
  uint64_t reserved = 0;
};
static_assert(sizeof(HvmModlistEntry) == 32);

// Types are the e820 ones (XEN_HVM_MEMMAP_TYPE_RAM = 1, _RESERVED = 2).
struct HvmMemmapTableEntry {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint32_t type = 0;
  uint32_t reserved = 0;
};
static_assert(sizeof(HvmMemmapTableEntry) == 24);

// The memmap table follows the start info; the one-entry module list
// follows the largest possible memmap. All of it stays below the zero page.
inline constexpr uint64_t kPvhMemmapAddr = kPvhStartInfoAddr + sizeof(HvmStartInfo);
inline constexpr uint64_t kPvhModlistAddr =
    kPvhMemmapAddr + kMaxE820Entries * sizeof(HvmMemmapTableEntry);
static_assert(kPvhModlistAddr + sizeof(HvmModlistEntry) <= kZeroPageAddr);

// Writes start info, memmap and (with an initrd) the module list.
// `rsdp_paddr` (0: none) is where the ACPI tables' RSDP is.
absl::Status WritePvhStartInfo(const memory::GuestMemory& mem, uint64_t cmdline_addr,
                               std::span<const E820Entry> memmap,
                               std::optional<AddressRange> initrd, uint64_t rsdp_paddr = 0);

}  // namespace dsec::arch
