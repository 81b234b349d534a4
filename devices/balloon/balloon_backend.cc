// SPDX-License-Identifier: Apache-2.0
#include "devices/balloon/balloon_backend.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "absl/strings/str_format.h"
#include "base/status.h"
#include "platform/memory/memfd_guest_memory.h"

namespace dsec::devices {

MemfdBalloonBackend::MemfdBalloonBackend(std::vector<Region> regions, Method method)
    : regions_(std::move(regions)), method_(method) {
  for (const Region& r : regions_) ranges_.push_back({r.gpa, r.size});
}

absl::StatusOr<std::unique_ptr<MemfdBalloonBackend>> MemfdBalloonBackend::Create(
    std::vector<Region> regions, Method method) {
  uint64_t prev_end = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    const Region& r = regions[i];
    const bool pow2 = r.page_size >= 4096 && (r.page_size & (r.page_size - 1)) == 0;
    if (!pow2 || r.size == 0 || r.gpa % r.page_size != 0 || r.size % r.page_size != 0 ||
        r.fd_offset % r.page_size != 0 || r.gpa + r.size < r.gpa || (i > 0 && r.gpa < prev_end)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "balloon backend: region %d [0x%x, +0x%x) page %d is unaligned, empty or overlapping",
          i, r.gpa, r.size, r.page_size));
    }
    if ((r.fd < 0 && method != Method::kMadvDontNeed) ||
        (method != Method::kPunchHole && r.host == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("balloon backend: region %d lacks its memfd or mapping", i));
    }
    prev_end = r.gpa + r.size;
  }
  return std::unique_ptr<MemfdBalloonBackend>(new MemfdBalloonBackend(std::move(regions), method));
}

absl::StatusOr<std::unique_ptr<MemfdBalloonBackend>> MemfdBalloonBackend::ForGuestMemory(
    const memory::MemfdGuestMemory& memory, Method method) {
  std::vector<Region> regions;
  for (size_t i = 0; i < memory.regions().size(); ++i) {
    const memory::GuestRegion& g = memory.regions()[i];
    struct stat st;
    if (memory.private_file()) {
      // Punching holes would change the snapshot file every restored VM
      // maps: its private copies are dropped instead.
      regions.push_back({g.gpa, g.size, -1, 0, g.host, 4096});
      continue;
    }
    if (::fstat(memory.RegionFd(i), &st) != 0) return ErrnoStatus("fstat(guest RAM memfd)");
    const uint64_t page = st.st_blksize > 4096 ? static_cast<uint64_t>(st.st_blksize) : 4096;
    regions.push_back({g.gpa, g.size, memory.RegionFd(i), 0, g.host, page});
  }
  return Create(std::move(regions), memory.private_file() ? Method::kMadvDontNeed : method);
}

absl::StatusOr<uint64_t> MemfdBalloonBackend::Release(uint64_t gpa, uint64_t len) {
  const Region* region = nullptr;
  for (const Region& r : regions_) {
    if (gpa >= r.gpa && gpa < r.gpa + r.size) {
      region = &r;
      break;
    }
  }
  // Guest-controlled (checked by the device already): never release outside
  // a RAM region or across its end.
  if (region == nullptr || len == 0 || len > region->gpa + region->size - gpa ||
      gpa % 4096 != 0 || len % 4096 != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("balloon backend: [0x%x, +0x%x) is not releasable RAM", gpa, len));
  }
  // Only whole backing pages can be released (2 MiB on hugetlbfs).
  const uint64_t page = region->page_size;
  const uint64_t start = (gpa + page - 1) / page * page;
  const uint64_t end = (gpa + len) / page * page;
  if (end <= start) return 0;
  const uint64_t offset = start - region->gpa;
  if (method_ == Method::kPunchHole) {
    if (::fallocate(region->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    static_cast<off_t>(region->fd_offset + offset),
                    static_cast<off_t>(end - start)) != 0) {
      return ErrnoToStatus("fallocate(PUNCH_HOLE, guest RAM)");
    }
  } else if (method_ == Method::kMadvDontNeed) {
    if (::madvise(region->host + offset, end - start, MADV_DONTNEED) != 0) {
      return ErrnoToStatus("madvise(MADV_DONTNEED, restored guest RAM)");
    }
  } else if (::madvise(region->host + offset, end - start, MADV_REMOVE) != 0) {
    return ErrnoToStatus("madvise(MADV_REMOVE, guest RAM)");
  }
  return end - start;
}

}  // namespace dsec::devices
