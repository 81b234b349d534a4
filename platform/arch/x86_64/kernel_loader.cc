// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/kernel_loader.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "base/status.h"

namespace dsec::arch {

const char* KernelFormatName(KernelFormat format) {
  switch (format) {
    case KernelFormat::kElf64:
      return "elf64";
    case KernelFormat::kElf32:
      return "elf32";
    case KernelFormat::kBzImage:
      return "bzImage";
  }
  return "unknown";
}

namespace internal {

absl::Status CheckKernelRange(const AddressRange& range, const memory::GuestMemory& mem,
                              const std::string& what) {
  if (range.start + range.size < range.start) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s [0x%x, +0x%x) wraps the address space", what, range.start, range.size));
  }
  for (const AddressRange& reserved : {kLowMonitorArea, kLowReservedArea}) {
    if (range.Overlaps(reserved)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s [0x%x, 0x%x) overlaps memory reserved by the monitor [0x%x, 0x%x)", what,
          range.start, range.end(), reserved.start, reserved.end()));
    }
  }
  if (!mem.IsValidRange(range.start, range.size)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s [0x%x, 0x%x) is not inside guest RAM", what, range.start, range.end()));
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::StatusOr<KernelImage> ParseKernel(std::span<const uint8_t> image,
                                        const memory::GuestMemory& mem) {
  if (image.size() >= 4 && std::memcmp(image.data(), "\x7f" "ELF", 4) == 0) {
    return ParseElfKernel(image, mem);
  }
  // Boot protocol: boot_flag 0xAA55 at 0x1FE and "HdrS" at 0x202 identify a
  // kernel with a setup header.
  if (image.size() >= 0x206 && image[0x1fe] == 0x55 && image[0x1ff] == 0xaa &&
      std::memcmp(image.data() + 0x202, "HdrS", 4) == 0) {
    return ParseBzImage(image, mem);
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("kernel image (%d bytes) is neither an ELF file nor a bzImage",
                      image.size()));
}

absl::Status LoadKernel(std::span<const uint8_t> image, const KernelImage& kernel,
                        const memory::GuestMemory& mem) {
  for (const KernelSegment& seg : kernel.segments) {
    // ParseKernel checked these; re-checking keeps a mismatched span from
    // reading past the image.
    if (seg.file_offset > image.size() || seg.file_size > image.size() - seg.file_offset ||
        seg.file_size > seg.mem_size) {
      return absl::InvalidArgumentError("kernel segment does not match the parsed image");
    }
    DSEC_RETURN_IF_ERROR(mem.Write(seg.gpa, image.subspan(seg.file_offset, seg.file_size)));
    DSEC_RETURN_IF_ERROR(
        mem.Fill(seg.gpa + seg.file_size, 0, seg.mem_size - seg.file_size));
  }
  return absl::OkStatus();
}

}  // namespace dsec::arch
