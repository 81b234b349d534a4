// SPDX-License-Identifier: Apache-2.0
// The fixed guest-physical layout of a dsec-vmm x86-64 microVM. The monitor,
// the device model and the freestanding test guest all rely on these values,
// so they live in one place and change only together.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::arch {

// A half-open guest-physical range [start, start + size).
struct AddressRange {
  uint64_t start = 0;
  uint64_t size = 0;
  constexpr uint64_t end() const { return start + size; }
  bool Overlaps(const AddressRange& o) const {
    return size != 0 && o.size != 0 && start < o.end() && o.start < end();
  }
  bool Contains(const AddressRange& o) const { return o.start >= start && o.end() <= end(); }
  friend bool operator==(const AddressRange&, const AddressRange&) = default;
};

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;
inline constexpr uint64_t kPageSize = 4 * kKiB;

// RAM and the 32-bit MMIO hole. RAM below the hole starts at 0; whatever does
// not fit below 3 GiB continues at 4 GiB.
inline constexpr uint64_t kMmioHoleStart = 0xC000'0000;
inline constexpr uint64_t kMmioHoleEnd = 4 * kGiB;
inline constexpr uint64_t kHighRamStart = 4 * kGiB;
inline constexpr uint64_t kMinRamBytes = 16 * kMiB;

// Devices inside the hole.
inline constexpr uint64_t kVirtioMmioBase = 0xD000'0000;
inline constexpr uint64_t kVirtioMmioStride = 0x1000;
inline constexpr uint64_t kTestDeviceBase = 0xD800'0000;  // = DSEC_TESTDEV_BASE
inline constexpr uint64_t kIoApicBase = 0xFEC0'0000;
inline constexpr uint64_t kLapicBase = 0xFEE0'0000;

// Low memory the monitor writes before the first instruction.
inline constexpr uint64_t kBootGdtAddr = 0x500;
inline constexpr uint64_t kBootTssAddr = 0x580;  // 104-byte TSS, KVM needs a usable TR
inline constexpr uint64_t kPvhStartInfoAddr = 0x6000;
inline constexpr uint64_t kZeroPageAddr = 0x7000;
inline constexpr uint64_t kBootStackTop = 0x8ff0;
inline constexpr uint64_t kPml4Addr = 0x9000;
inline constexpr uint64_t kPdptAddr = 0xA000;
inline constexpr uint64_t kPdAddr = 0xB000;  // four PDs: 0xB000-0xEFFF
inline constexpr uint64_t kIdentityMapBytes = 4 * kGiB;
inline constexpr uint64_t kCmdlineAddr = 0x20000;
inline constexpr uint64_t kCmdlineMaxBytes = 64 * kKiB - 1;  // incl. the NUL
inline constexpr uint64_t kMpTableAddr = 0x9FC00;  // in the EBDA, where Linux scans

// Ranges a kernel image must not be loaded over: the monitor's own boot data
// and command line, and the EBDA/VGA/BIOS area reported reserved in e820.
// 0x10000-0x1FFFF is left free for the guest.
inline constexpr AddressRange kLowMonitorArea{0, 0x30000};
inline constexpr AddressRange kLowReservedArea{0x9FC00, 0x100000 - 0x9FC00};

// Where the protected-mode part of a bzImage is loaded (boot protocol:
// "loaded at 0x100000" for LOADED_HIGH kernels).
inline constexpr uint64_t kBzImageLoadAddr = 0x100000;

// The RAM ranges of a guest with mem_bytes of RAM: [0, min(mem, 3 GiB)) and,
// above 3 GiB, the rest at [4 GiB, ...). mem_bytes must be a multiple of 4 KiB
// and at least 16 MiB (InvalidArgument otherwise).
absl::StatusOr<std::vector<AddressRange>> RamRanges(uint64_t mem_bytes);

}  // namespace dsec::arch
