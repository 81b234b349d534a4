// SPDX-License-Identifier: Apache-2.0
// The Linux x86 boot protocol "zero page" (struct boot_params), command line
// and initrd placement for the 64-bit boot protocol.
#pragma once

#include <asm/bootparam.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "platform/arch/x86_64/e820.h"
#include "platform/arch/x86_64/kernel_loader.h"
#include "platform/arch/x86_64/layout.h"
#include "platform/memory/guest_memory.h"

namespace dsec::arch {

// Boot protocol: type_of_loader 0xff means "undefined" boot loader.
inline constexpr uint8_t kLoaderTypeUndefined = 0xff;

// InvalidArgument unless the command line has no NUL byte and, with its
// terminating NUL, fits both the monitor's slot (kCmdlineMaxBytes) and the
// kernel's cmdline_size.
absl::Status CheckCmdline(std::string_view cmdline, const KernelImage& kernel);

// End of the RAM region that starts at 0, capped at the MMIO hole.
absl::StatusOr<uint64_t> LowRamEnd(const memory::GuestMemory& mem);

// Chooses where the initrd goes: page-aligned, as high as possible below
// min(initrd_addr_max + 1, end of low RAM), not overlapping the kernel's
// footprint nor memory below 1 MiB. InvalidArgument if it does not fit.
absl::StatusOr<AddressRange> PlaceInitrd(uint64_t size, const KernelImage& kernel,
                                         const memory::GuestMemory& mem);

// Builds the zero page: the kernel's setup header (bzImage) or a minimal one
// (ELF), loader type, command line pointer, initrd and e820 map.
absl::StatusOr<boot_params> BuildZeroPage(const KernelImage& kernel, uint64_t cmdline_addr,
                                          uint64_t cmdline_len,
                                          std::optional<AddressRange> initrd,
                                          std::span<const E820Entry> e820);

}  // namespace dsec::arch
