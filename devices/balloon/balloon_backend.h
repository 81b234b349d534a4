// SPDX-License-Identifier: Apache-2.0
// The host side of virtio-balloon: which guest-physical memory may be given
// back to the host, and how it is given back.
//
// Which call really frees guest RAM that lives in a memfd mapped MAP_SHARED
// (measured by memfd_balloon_backend_test, an integration test, on this
// host's 6.x kernel):
//  - fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE) on the memfd and
//    madvise(MADV_REMOVE) on the mapping free the shmem pages: the memfd's
//    st_blocks and the process's RSS both drop.
//  - madvise(MADV_DONTNEED) on the MAP_SHARED mapping only unmaps: RSS drops
//    but the pages stay in the memfd's page cache (st_blocks unchanged, the
//    data is still there), so it frees nothing. It is never used to release.
// The memfd backend punches holes by default (no mapping needed, works on
// hugetlbfs memfds with 2 MiB granularity); MADV_REMOVE is the alternative.
// Either way the guest reads zeros from a released page afterwards: its old
// content is gone (section 5.5.6.1: the driver must not rely on it).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::memory {
class MemfdGuestMemory;
}  // namespace dsec::memory

namespace dsec::devices {

// A guest-physical range [gpa, gpa + size).
struct BalloonRange {
  uint64_t gpa = 0;
  uint64_t size = 0;
  uint64_t end() const { return gpa + size; }
};

// Threads: releasable() is constant and may be read from any thread;
// Release() is called by the device on its event-loop thread only.
class BalloonBackend {
 public:
  virtual ~BalloonBackend() = default;

  // Guest RAM that may be released: sorted, disjoint, page-aligned, fixed
  // for the backend's life. Anything else the guest names (pmem windows,
  // MMIO, holes) is refused by the device before Release() is called.
  virtual std::span<const BalloonRange> releasable() const = 0;

  // Gives the host memory behind [gpa, gpa + len) back to the host. The range
  // is page-aligned and lies inside one releasable() range (the backend
  // checks again and refuses anything else with InvalidArgument). Returns
  // the bytes actually released (less than len where the backing has larger
  // pages, e.g. 2 MiB hugetlbfs pages only released when wholly covered).
  virtual absl::StatusOr<uint64_t> Release(uint64_t gpa, uint64_t len) = 0;
};

// Releases guest RAM held in memfds (MemfdGuestMemory: one memfd per region).
class MemfdBalloonBackend : public BalloonBackend {
 public:
  enum class Method {
    kPunchHole,   // fallocate(PUNCH_HOLE | KEEP_SIZE) on the memfd
    kMadvRemove,  // madvise(MADV_REMOVE) on the MAP_SHARED mapping
    // madvise(MADV_DONTNEED) on a MAP_PRIVATE mapping of a snapshot's memory
    // file (a restored VM): drops the page's private copy, the file (shared
    // by every restored VM) untouched; the page then reads as the
    // snapshot's (a balloon page's content is undefined to the guest).
    kMadvDontNeed,
  };
  // One guest RAM region. fd and host are not owned and must outlive the
  // backend; host may be null with kPunchHole.
  struct Region {
    uint64_t gpa = 0;
    uint64_t size = 0;
    int fd = -1;
    uint64_t fd_offset = 0;
    uint8_t* host = nullptr;
    uint64_t page_size = 4096;  // backing page size (2 MiB for hugetlbfs)
  };

  // InvalidArgument for unsorted/overlapping/unaligned regions, a missing fd
  // or (with kMadvRemove) a missing mapping.
  static absl::StatusOr<std::unique_ptr<MemfdBalloonBackend>> Create(std::vector<Region> regions,
                                                                     Method method);
  // All RAM regions of `memory` (which must outlive the backend); the page
  // size of each comes from fstat (st_blksize: 2 MiB on hugetlbfs).
  static absl::StatusOr<std::unique_ptr<MemfdBalloonBackend>> ForGuestMemory(
      const memory::MemfdGuestMemory& memory, Method method = Method::kPunchHole);

  std::span<const BalloonRange> releasable() const override { return ranges_; }
  absl::StatusOr<uint64_t> Release(uint64_t gpa, uint64_t len) override;

 private:
  MemfdBalloonBackend(std::vector<Region> regions, Method method);

  const std::vector<Region> regions_;
  const Method method_;
  std::vector<BalloonRange> ranges_;
};

}  // namespace dsec::devices
