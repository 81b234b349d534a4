// SPDX-License-Identifier: Apache-2.0
// Kernel image parsing and loading for direct kernel boot: ELF vmlinux (ELF64
// x86-64, or ELF32 with a PVH entry note) and bzImage (Linux x86 boot
// protocol >= 2.12, 64-bit entry).
//
// Parsing validates the whole image against the guest's memory layout and
// produces a plan; loading only copies bytes the plan names. An image that
// fails parsing therefore never touches guest memory.
//
// Threads: pure functions; the image and guest memory are only read while
// parsing. Callable from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "platform/arch/x86_64/layout.h"
#include "platform/memory/guest_memory.h"

namespace dsec::arch {

enum class KernelFormat { kElf64, kElf32, kBzImage };
const char* KernelFormatName(KernelFormat format);

// Bytes [file_offset, file_offset + file_size) of the image go to gpa; the
// rest of mem_size (ELF bss) is zeroed.
struct KernelSegment {
  uint64_t file_offset = 0;
  uint64_t file_size = 0;
  uint64_t gpa = 0;
  uint64_t mem_size = 0;
};

// Boot protocol: "initrd_addr_max" default for kernels without a setup header.
inline constexpr uint32_t kDefaultInitrdAddrMax = 0x37FF'FFFF;
// Xen ELF note (xen/include/public/elfnote.h) that carries the 32-bit PVH entry.
inline constexpr uint32_t kXenElfNotePhys32Entry = 18;
// Upper bounds that keep validation cheap on hostile input; real kernels
// have a handful of program headers.
inline constexpr uint32_t kMaxProgramHeaders = 64;

struct KernelImage {
  KernelFormat format = KernelFormat::kElf64;
  std::vector<KernelSegment> segments;
  // Guest memory the kernel occupies or will use before it reads the memory
  // map (segments, plus init_size from the runtime address for a bzImage).
  AddressRange footprint;
  // 64-bit entry point (ELF64 e_entry, bzImage load address + 0x200), when
  // the image can be started in long mode.
  std::optional<uint64_t> entry64;
  // 32-bit PVH entry from the XEN_ELFNOTE_PHYS32_ENTRY note, if present.
  std::optional<uint32_t> pvh_entry;

  // bzImage only: the setup header bytes (boot protocol: from 0x1f1 to
  // 0x202 + byte at 0x201), copied into the zero page at offset 0x1f1.
  std::vector<uint8_t> setup_header;
  uint16_t protocol_version = 0;
  uint32_t initrd_addr_max = kDefaultInitrdAddrMax;
  // Longest command line the kernel accepts, without the NUL.
  uint32_t cmdline_max = static_cast<uint32_t>(kCmdlineMaxBytes - 1);
};

// Detects the format and validates the image. Every malformed input yields
// InvalidArgument naming what is wrong.
absl::StatusOr<KernelImage> ParseKernel(std::span<const uint8_t> image,
                                        const memory::GuestMemory& mem);
absl::StatusOr<KernelImage> ParseElfKernel(std::span<const uint8_t> image,
                                           const memory::GuestMemory& mem);
absl::StatusOr<KernelImage> ParseBzImage(std::span<const uint8_t> image,
                                         const memory::GuestMemory& mem);

// Copies the segments of a parsed image into guest memory and zeroes bss.
// `image` must be the span ParseKernel validated.
absl::Status LoadKernel(std::span<const uint8_t> image, const KernelImage& kernel,
                        const memory::GuestMemory& mem);

namespace internal {
// Checks a segment lies in RAM and outside the monitor's reserved areas;
// `what` names it in the error ("ELF segment 2").
absl::Status CheckKernelRange(const AddressRange& range, const memory::GuestMemory& mem,
                              const std::string& what);
}  // namespace internal

}  // namespace dsec::arch
