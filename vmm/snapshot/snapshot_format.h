// SPDX-License-Identifier: Apache-2.0
// The on-disk form of a microVM snapshot: a directory with
//
//   memory         guest RAM, one region after another at the offsets the
//                  manifest gives (sparse: never-touched pages are holes)
//   manifest.json  everything else: the VM's configuration, each vCPU's
//                  state, the irqchip and clock, each device's state
//
// manifest.json is one header line, then the body:
//
//   {"format":"dsec-vm-snapshot","version":1,"body_bytes":N,"crc32":C}\n
//   <N bytes of JSON: the body>
//
// The header is read first, so that a foreign or newer format is named as
// such; the CRC-32 (zlib's) covers the body's bytes exactly as written.
// Everything in a snapshot is untrusted input: ParseManifest checks every
// size, count and offset before the caller maps or allocates anything, and
// every error names the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "platform/kvm/x86_types.h"

namespace dsec::snapshot {

inline constexpr std::string_view kFormatName = "dsec-vm-snapshot";
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr char kManifestFile[] = "manifest.json";
inline constexpr char kMemoryFile[] = "memory";

// Bounds on what a manifest may ask for.
inline constexpr uint64_t kMaxManifestBytes = 16ull << 20;
inline constexpr uint32_t kMaxVcpus = 255;
inline constexpr uint32_t kMaxRegions = 16;
inline constexpr uint32_t kMaxMsrs = 1024;
inline constexpr uint32_t kMaxCpuidEntries = 256;
inline constexpr uint32_t kMaxXsaveBytes = 64 << 10;
inline constexpr uint64_t kPageSize = 4096;
// 1 TiB: above any VM this monitor makes (VmConfig caps at 1 TiB too).
inline constexpr uint64_t kMaxMemoryBytes = 1ull << 40;

struct MemoryRegion {
  uint64_t gpa = 0;
  uint64_t size = 0;
  uint64_t offset = 0;  // in the memory file
};

struct VcpuState {
  uint32_t id = 0;
  kvm::Registers regs;
  kvm::SpecialRegisters sregs;
  kvm::FpuRegs fpu;
  // Where KVM has KVM_CAP_XSAVE: the area as KVM_GET_XSAVE2 gives it
  // (4 KiB or more: the host's size, which restoring needs at least).
  std::optional<std::vector<uint8_t>> xsave;
  std::optional<kvm::XcrsState> xcrs;   // where KVM has KVM_CAP_XCRS
  kvm::DebugRegs debugregs;
  kvm::LapicState lapic;
  kvm::VcpuEvents events;
  uint32_t mp_state = 0;
  std::vector<kvm::MsrEntry> msrs;
  std::vector<kvm::CpuidEntry> cpuid;  // what the guest saw
  uint32_t tsc_khz = 0;                // 0: unknown
};

// A diff snapshot's parent: the snapshot directory beside it named `name`,
// whose manifest body has CRC-32 `crc32` (so that another snapshot put
// under that name is refused).
struct ParentRef {
  std::string name;
  uint32_t crc32 = 0;
};

// A name a parent may have: 1..128 of [A-Za-z0-9._-], not "." or "..".
bool ValidParentName(std::string_view name);

// A run of pages a diff snapshot holds, in memory-file bytes.
struct Extent {
  uint64_t offset = 0;
  uint64_t length = 0;
};
inline constexpr uint32_t kMaxExtents = 1u << 18;

struct Manifest {
  int64_t created_unix_ms = 0;
  // Set for a diff snapshot: its memory file holds only the pages that
  // changed since the parent was taken (holes elsewhere: the parent's).
  std::optional<ParentRef> parent;
  // With a parent: the runs of the memory file that hold data (page
  // aligned, sorted, inside the regions); everything else is the parent's.
  std::vector<Extent> extents;
  // The body's CRC-32 as ParseManifest read it (a child's ParentRef).
  uint32_t crc32 = 0;
  // The VM's configuration in the monitor's JSON form (vmm/vm's
  // VmConfigToJson): what the restoring side rebuilds the VM from. Its own
  // checks are the VM's.
  nlohmann::json config;
  uint64_t memory_file_bytes = 0;
  std::vector<MemoryRegion> regions;
  std::vector<VcpuState> vcpus;
  std::vector<kvm::IrqchipState> irqchips;  // PIC master, PIC slave, IOAPIC
  kvm::ClockData clock;
  // Device name ("serial", "pit", ...) -> that device's state; each device
  // checks its own.
  nlohmann::json devices = nlohmann::json::object();
};

// The pages a lazy restore touched (Vm::TouchedPages), for the next
// restore of the same snapshot to prefetch: one JSON object,
//   {"format":"dsec-vm-touched","version":1,"runs":[[offset,length],...]}
// runs of the memory file, page-aligned, sorted, not sharing bytes, at most
// kMaxExtents of them. Whether they lie inside guest RAM is the restore's
// check (Vm::Restore refuses a run outside it).
inline constexpr std::string_view kTouchedFormatName = "dsec-vm-touched";
inline constexpr uint64_t kMaxTouchedBytes = 16ull << 20;
// `runs` sorted and apart; more than kMaxExtents are joined across the
// smallest gaps until they fit.
std::string SerializeTouched(const std::vector<Extent>& runs);
// InvalidArgument naming the run or field; FailedPrecondition for another
// format or version.
absl::StatusOr<std::vector<Extent>> ParseTouched(std::string_view bytes);

// A snapshot's file read whole: a regular file (a symlink is not followed)
// of at most `max_bytes`, checked on the open file before anything is read;
// InvalidArgument naming `path` otherwise.
absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, uint64_t max_bytes);

// The manifest file's bytes.
std::string SerializeManifest(const Manifest& manifest);
// Checks the header, the CRC, and every field; InvalidArgument naming the
// field (FailedPrecondition for a format or version this code does not
// read).
absl::StatusOr<Manifest> ParseManifest(std::string_view bytes);

}  // namespace dsec::snapshot
