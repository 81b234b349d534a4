// SPDX-License-Identifier: Apache-2.0
// The controller's view of host memory of its own process: page table bits
// (/proc/self/pagemap), page cache residency (mincore), advice (madvise), and
// whether the host has swap (/proc/swaps). Behind an interface so that the
// estimator and the controller are tested against a simulated page table.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "balloon/reclaim_vm.h"
#include "base/scoped_fd.h"

namespace dsec::balloon {

inline constexpr uint64_t kHostPageSize = 4096;
// /proc/<pid>/pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst).
inline constexpr uint64_t kPagemapPresent = 1ull << 63;
inline constexpr uint64_t kPagemapSwapped = 1ull << 62;
inline constexpr uint64_t kPagemapSoftDirty = 1ull << 55;

// Threads: one thread at a time.
class HostMemoryOps {
 public:
  virtual ~HostMemoryOps() = default;
  // One pagemap entry per 4 KiB page starting at page-aligned `addr`.
  virtual absl::Status ReadPagemap(uint64_t addr, std::span<uint64_t> out) = 0;
  // mincore(2): bit 0 of each byte set if the page is resident (for a
  // shared memfd mapping: in the page cache, mapped or not).
  virtual absl::Status Residency(uint64_t addr, std::span<uint8_t> out) = 0;
  // madvise(2) over [addr, addr + len).
  virtual absl::Status Advise(uint64_t addr, uint64_t len, int advice) = 0;
};

// The real thing for this process.
class ProcSelfMemoryOps : public HostMemoryOps {
 public:
  static absl::StatusOr<std::unique_ptr<ProcSelfMemoryOps>> Create();
  absl::Status ReadPagemap(uint64_t addr, std::span<uint64_t> out) override;
  absl::Status Residency(uint64_t addr, std::span<uint8_t> out) override;
  absl::Status Advise(uint64_t addr, uint64_t len, int advice) override;

 private:
  explicit ProcSelfMemoryOps(ScopedFd pagemap) : pagemap_(std::move(pagemap)) {}
  ScopedFd pagemap_;
};

// Swap devices of the host, from /proc/swaps.
struct SwapSummary {
  int devices = 0;
  uint64_t total_bytes = 0;
  uint64_t used_bytes = 0;
  bool available() const { return devices > 0 && total_bytes > used_bytes; }
};
// Parses /proc/swaps text (header line, then one device per line).
absl::StatusOr<SwapSummary> ParseSwaps(std::string_view text);
absl::StatusOr<SwapSummary> ReadSwaps(const std::string& path = "/proc/swaps");

// Whether every range lies in a shared mapping ("s" in the permissions of
// /proc/self/maps): the estimator's MADV_DONTNEED keeps page content only
// there. `maps_text` is the content of a maps file.
absl::Status CheckSharedMappings(std::string_view maps_text, std::span<const HostRange> ranges);

}  // namespace dsec::balloon
