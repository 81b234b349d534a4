// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/zero_page.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/status.h"

namespace dsec::arch {

// The zero page is an ABI (Documentation/arch/x86/zero-page.rst); these are
// the offsets this file relies on.
static_assert(sizeof(boot_params) == 4096);
static_assert(offsetof(boot_params, ext_ramdisk_image) == 0x0c0);
static_assert(offsetof(boot_params, ext_ramdisk_size) == 0x0c4);
static_assert(offsetof(boot_params, ext_cmd_line_ptr) == 0x0c8);
static_assert(offsetof(boot_params, e820_entries) == 0x1e8);
static_assert(offsetof(boot_params, hdr) == 0x1f1);
static_assert(offsetof(boot_params, e820_table) == 0x2d0);
static_assert(sizeof(boot_e820_entry) == 20);
static_assert(0x1f1 + offsetof(setup_header, boot_flag) == 0x1fe);
static_assert(0x1f1 + offsetof(setup_header, header) == 0x202);
static_assert(0x1f1 + offsetof(setup_header, version) == 0x206);
static_assert(0x1f1 + offsetof(setup_header, type_of_loader) == 0x210);
static_assert(0x1f1 + offsetof(setup_header, loadflags) == 0x211);
static_assert(0x1f1 + offsetof(setup_header, ramdisk_image) == 0x218);
static_assert(0x1f1 + offsetof(setup_header, ramdisk_size) == 0x21c);
static_assert(0x1f1 + offsetof(setup_header, cmd_line_ptr) == 0x228);
static_assert(0x1f1 + offsetof(setup_header, initrd_addr_max) == 0x22c);
static_assert(0x1f1 + offsetof(setup_header, kernel_alignment) == 0x230);
static_assert(0x1f1 + offsetof(setup_header, xloadflags) == 0x236);
static_assert(0x1f1 + offsetof(setup_header, cmdline_size) == 0x238);
static_assert(0x1f1 + offsetof(setup_header, pref_address) == 0x258);
static_assert(0x1f1 + offsetof(setup_header, init_size) == 0x260);

absl::Status CheckCmdline(std::string_view cmdline, const KernelImage& kernel) {
  if (cmdline.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError("kernel command line contains a NUL byte");
  }
  if (cmdline.size() + 1 > kCmdlineMaxBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kernel command line of %d bytes exceeds the monitor's limit of %d", cmdline.size(),
        kCmdlineMaxBytes - 1));
  }
  if (cmdline.size() > kernel.cmdline_max) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kernel command line of %d bytes exceeds the kernel's cmdline_size %d", cmdline.size(),
        kernel.cmdline_max));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> LowRamEnd(const memory::GuestMemory& mem) {
  const memory::GuestRegion* r = mem.FindRegion(0);
  if (r == nullptr) return absl::InvalidArgumentError("guest has no RAM at address 0");
  return std::min<uint64_t>(r->end(), kMmioHoleStart);
}

absl::StatusOr<AddressRange> PlaceInitrd(uint64_t size, const KernelImage& kernel,
                                         const memory::GuestMemory& mem) {
  if (size == 0) return absl::InvalidArgumentError("initrd is empty");
  DSEC_ASSIGN_OR_RETURN(uint64_t low_end, LowRamEnd(mem));
  const uint64_t limit = std::min<uint64_t>(uint64_t{kernel.initrd_addr_max} + 1, low_end);
  const uint64_t floor = kLowReservedArea.end();
  uint64_t top = limit;
  // At most two tries: below the limit, then below the kernel if the first
  // spot overlapped it.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (size > top || ((top - size) & ~(kPageSize - 1)) < floor) break;
    AddressRange r{(top - size) & ~(kPageSize - 1), size};
    if (!r.Overlaps(kernel.footprint)) {
      if (!mem.IsValidRange(r.start, r.size)) break;
      return r;
    }
    top = kernel.footprint.start;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "initrd of %d bytes does not fit in RAM between 0x%x and 0x%x outside the kernel "
      "[0x%x, 0x%x)",
      size, floor, limit, kernel.footprint.start, kernel.footprint.end()));
}

absl::StatusOr<boot_params> BuildZeroPage(const KernelImage& kernel, uint64_t cmdline_addr,
                                          uint64_t cmdline_len,
                                          std::optional<AddressRange> initrd,
                                          std::span<const E820Entry> e820) {
  if (e820.size() > E820_MAX_ENTRIES_ZEROPAGE) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d e820 entries do not fit the zero page", e820.size()));
  }
  if (cmdline_addr > UINT32_MAX) {
    return absl::InvalidArgumentError("command line must be below 4 GiB");
  }
  boot_params bp;
  std::memset(&bp, 0, sizeof(bp));
  if (!kernel.setup_header.empty()) {
    // Boot protocol: copy the kernel's setup header into a zeroed
    // boot_params, then fill in the loader-written fields.
    std::memcpy(&bp.hdr, kernel.setup_header.data(),
                std::min(kernel.setup_header.size(), sizeof(bp.hdr)));
  } else {
    // An ELF vmlinux has no header; give it the signature fields the kernel
    // checks and the alignment it would have asked for.
    bp.hdr.boot_flag = 0xAA55;
    std::memcpy(&bp.hdr.header, "HdrS", 4);
    bp.hdr.kernel_alignment = 0x0100'0000;
    bp.hdr.cmdline_size = static_cast<uint32_t>(cmdline_len);
  }
  bp.hdr.type_of_loader = kLoaderTypeUndefined;
  bp.hdr.cmd_line_ptr = static_cast<uint32_t>(cmdline_addr);
  if (initrd) {
    bp.hdr.ramdisk_image = static_cast<uint32_t>(initrd->start);
    bp.hdr.ramdisk_size = static_cast<uint32_t>(initrd->size);
    bp.ext_ramdisk_image = static_cast<uint32_t>(initrd->start >> 32);
    bp.ext_ramdisk_size = static_cast<uint32_t>(initrd->size >> 32);
  }
  bp.e820_entries = static_cast<uint8_t>(e820.size());
  for (size_t i = 0; i < e820.size(); ++i) {
    bp.e820_table[i].addr = e820[i].addr;
    bp.e820_table[i].size = e820[i].size;
    bp.e820_table[i].type = e820[i].type;
  }
  return bp;
}

}  // namespace dsec::arch
