// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/pvh.h"

#include <vector>

#include "absl/strings/str_format.h"
#include "base/status.h"

namespace dsec::arch {

absl::Status WritePvhStartInfo(const memory::GuestMemory& mem, uint64_t cmdline_addr,
                               std::span<const E820Entry> memmap,
                               std::optional<AddressRange> initrd, uint64_t rsdp_paddr) {
  if (memmap.size() > kMaxE820Entries) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d memory map entries exceed the PVH table of %d", memmap.size(),
                        kMaxE820Entries));
  }
  HvmStartInfo info;
  info.cmdline_paddr = cmdline_addr;
  info.memmap_paddr = kPvhMemmapAddr;
  info.memmap_entries = static_cast<uint32_t>(memmap.size());
  info.rsdp_paddr = rsdp_paddr;
  std::vector<HvmMemmapTableEntry> table(memmap.size());
  for (size_t i = 0; i < memmap.size(); ++i) {
    table[i].addr = memmap[i].addr;
    table[i].size = memmap[i].size;
    table[i].type = memmap[i].type;
  }
  if (initrd) {
    // The initrd is the first (only) module; Linux's PVH entry takes
    // modlist[0] as its ramdisk.
    HvmModlistEntry mod;
    mod.paddr = initrd->start;
    mod.size = initrd->size;
    info.nr_modules = 1;
    info.modlist_paddr = kPvhModlistAddr;
    DSEC_RETURN_IF_ERROR(mem.WriteObj(kPvhModlistAddr, mod));
  }
  DSEC_RETURN_IF_ERROR(mem.Write(
      kPvhMemmapAddr, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(table.data()),
                                               table.size() * sizeof(HvmMemmapTableEntry))));
  return mem.WriteObj(kPvhStartInfoAddr, info);
}

}  // namespace dsec::arch
