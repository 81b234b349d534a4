// SPDX-License-Identifier: Apache-2.0
// bzImage parsing per the Linux x86 boot protocol
// (Documentation/arch/x86/boot.rst, "The Real-Mode Kernel Header" and
// "64-bit Boot Protocol").
#include <asm/bootparam.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "platform/arch/x86_64/kernel_loader.h"
#include "base/status.h"

namespace dsec::arch {

namespace {

absl::Status Bad(std::string msg) { return absl::InvalidArgumentError("bzImage: " + msg); }

constexpr uint64_t kSetupHeaderOffset = 0x1f1;
// xloadflags (needed to know the kernel has a 64-bit entry) exist from 2.12.
constexpr uint16_t kMinProtocol = 0x020c;
// The 64-bit entry is startup_64, 0x200 bytes into the protected-mode code
// (boot protocol, "64-bit BOOT PROTOCOL").
constexpr uint64_t kEntry64Offset = 0x200;

}  // namespace

absl::StatusOr<KernelImage> ParseBzImage(std::span<const uint8_t> image,
                                         const memory::GuestMemory& mem) {
  if (image.size() < kSetupHeaderOffset + sizeof(setup_header)) {
    return Bad(absl::StrFormat("file of %d bytes is shorter than the setup header", image.size()));
  }
  setup_header hdr;
  std::memcpy(&hdr, image.data() + kSetupHeaderOffset, sizeof(hdr));
  if (hdr.boot_flag != 0xAA55) return Bad("boot_flag at 0x1fe is not 0xAA55");
  if (std::memcmp(&hdr.header, "HdrS", 4) != 0) return Bad("no \"HdrS\" signature at 0x202");
  if (hdr.version < kMinProtocol) {
    return Bad(absl::StrFormat("boot protocol %d.%02d is older than 2.12", hdr.version >> 8,
                               hdr.version & 0xff));
  }
  // The header ends at 0x202 + the byte at 0x201 (the jump offset). It must
  // reach every field this loader reads, up to init_size.
  const uint64_t header_end = 0x202 + uint64_t{image[0x201]};
  constexpr uint64_t kNeeded =
      kSetupHeaderOffset + offsetof(setup_header, init_size) + sizeof(hdr.init_size);
  if (header_end < kNeeded) {
    return Bad(absl::StrFormat("setup header ends at 0x%x, before init_size", header_end));
  }
  if (!(hdr.loadflags & LOADED_HIGH)) return Bad("kernel is not LOADED_HIGH (zImage)");
  if (!(hdr.xloadflags & XLF_KERNEL_64)) return Bad("kernel has no 64-bit entry (XLF_KERNEL_64)");

  // setup_sects == 0 means 4 (boot protocol, "setup_sects").
  const uint64_t setup_sects = hdr.setup_sects == 0 ? 4 : hdr.setup_sects;
  const uint64_t pm_offset = (setup_sects + 1) * 512;
  if (pm_offset >= image.size()) {
    return Bad(absl::StrFormat("protected-mode code at 0x%x is beyond the end of the %d-byte file",
                               pm_offset, image.size()));
  }
  const uint64_t pm_size = image.size() - pm_offset;

  // The kernel decompresses itself to its runtime address: for a relocatable
  // kernel the load address rounded up to kernel_alignment but not below
  // pref_address (LOAD_PHYSICAL_ADDR); otherwise pref_address. init_size
  // bytes from there must be RAM.
  uint64_t runtime = hdr.pref_address;
  if (hdr.relocatable_kernel) {
    uint64_t align = hdr.kernel_alignment;
    uint64_t aligned = kBzImageLoadAddr;
    if (align > 1 && (align & (align - 1)) == 0) {
      aligned = (kBzImageLoadAddr + align - 1) & ~(align - 1);
    }
    runtime = std::max(aligned, runtime);
  }
  if (runtime < kBzImageLoadAddr) runtime = kBzImageLoadAddr;
  if (runtime > UINT64_MAX - hdr.init_size) {
    return Bad(absl::StrFormat("pref_address 0x%x + init_size overflows", runtime));
  }
  const uint64_t end = std::max(kBzImageLoadAddr + pm_size, runtime + hdr.init_size);

  KernelImage out;
  out.format = KernelFormat::kBzImage;
  out.segments.push_back({pm_offset, pm_size, kBzImageLoadAddr, pm_size});
  out.footprint = {kBzImageLoadAddr, end - kBzImageLoadAddr};
  DSEC_RETURN_IF_ERROR(internal::CheckKernelRange(
      {kBzImageLoadAddr, pm_size}, mem, "bzImage protected-mode code"));
  DSEC_RETURN_IF_ERROR(internal::CheckKernelRange(
      out.footprint, mem, absl::StrFormat("bzImage with init_size 0x%x", hdr.init_size)));
  out.entry64 = kBzImageLoadAddr + kEntry64Offset;
  if (pm_size <= kEntry64Offset) {
    return Bad(absl::StrFormat("protected-mode code of %d bytes has no 64-bit entry at 0x200",
                               pm_size));
  }
  const uint64_t copy = std::min<uint64_t>(header_end - kSetupHeaderOffset, sizeof(setup_header));
  out.setup_header.assign(image.begin() + kSetupHeaderOffset,
                          image.begin() + kSetupHeaderOffset + copy);
  out.protocol_version = hdr.version;
  out.initrd_addr_max = hdr.initrd_addr_max;
  // cmdline_size exists from 2.06; it excludes the terminating NUL.
  out.cmdline_max = std::min<uint32_t>(hdr.cmdline_size, kCmdlineMaxBytes - 1);
  return out;
}

}  // namespace dsec::arch
