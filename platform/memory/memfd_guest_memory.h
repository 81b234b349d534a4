// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "base/mmap.h"
#include "base/scoped_fd.h"
#include "platform/memory/guest_memory.h"

namespace dsec::memory {

// Guest RAM backed by one memfd per region, mapped MAP_SHARED into the
// monitor. memfd (rather than anonymous memory) lets snapshots write the
// file, balloon release punch holes (MADV_REMOVE) and pageout work on it.
//
// Threads: created before any vCPU runs; immutable afterwards.
class MemfdGuestMemory : public GuestMemory {
 public:
  struct Options {
    bool hugepages = false;  // MFD_HUGETLB with 2 MiB pages
  };
  struct Range {
    uint64_t gpa;
    uint64_t size;
  };
  static absl::StatusOr<std::unique_ptr<MemfdGuestMemory>> Create(std::vector<Range> ranges,
                                                                  Options options);

  // Guest RAM restored from a snapshot: region i is `file` from byte
  // offsets[i], mapped MAP_PRIVATE (copy-on-write): every VM restored from
  // one file shares the pages it has not written in the host's page cache,
  // and nothing a VM writes reaches the file. Offsets must be page-aligned
  // and the file long enough (checked). Such memory has no memfd:
  // RegionFd() is -1 and private_file() true (hole punching would change
  // the shared file; the balloon refuses it).
  static absl::StatusOr<std::unique_ptr<MemfdGuestMemory>> MapPrivateFile(
      std::vector<Range> ranges, int file, std::vector<uint64_t> offsets);

  // Guest RAM as anonymous private memory (MAP_NORESERVE), empty: what a
  // lazy restore's pager fills (platform/memory/uffd_pager.h). Like
  // MapPrivateFile's, it has no memfd (private_file() true).
  static absl::StatusOr<std::unique_ptr<MemfdGuestMemory>> MapAnonymous(std::vector<Range> ranges);

  // For memory from MapPrivateFile: maps the byte runs `runs` of `file`
  // (file offsets, page-aligned) over the guest pages they stand for, region
  // i's pages being file bytes offsets[i].. (MAP_PRIVATE|MAP_FIXED: a diff
  // snapshot's pages over its parent's, still shared copy-on-write). Runs
  // outside every region are refused. Before any vCPU runs.
  struct Run {
    uint64_t offset;
    uint64_t length;
  };
  absl::Status OverlayPrivateFile(int file, const std::vector<uint64_t>& offsets,
                                  const std::vector<Run>& runs);

  // The memfd backing region i (same order as regions()); -1 for memory
  // mapped from a snapshot file.
  int RegionFd(size_t i) const { return fds_[i].get(); }
  bool private_file() const { return private_file_; }
  // Bytes of region i resident in the host (mincore over the mapping).
  absl::StatusOr<uint64_t> ResidentBytes() const;

 private:
  MemfdGuestMemory() = default;
  // A private region (no memfd) of `map`, offered to KSM.
  void AddPrivateRegion(const Range& range, Mmap map);
  std::vector<ScopedFd> fds_;
  std::vector<Mmap> maps_;
  bool private_file_ = false;
};

}  // namespace dsec::memory
