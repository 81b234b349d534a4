// SPDX-License-Identifier: Apache-2.0
#include "platform/memory/memfd_guest_memory.h"

#include <linux/memfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_format.h"
#include "base/status.h"

namespace dsec::memory {

namespace {
constexpr uint64_t kPageSize = 4096;
constexpr uint64_t kHugePageSize = 2ull << 20;

// Private guest RAM (a restored VM's) offered to KSM, as QEMU's mem-merge
// does: clones' private copies of equal pages can then be merged where
// the host runs ksmd (its global `run`; without it the advice costs
// nothing). Shared memory (a booted VM's memfd) is never scanned by KSM.
// A kernel without KSM refuses the advice (EINVAL): not an error.
void OfferToKsm(uint8_t* p, uint64_t size) {
#ifdef MADV_MERGEABLE
  (void)::madvise(p, size, MADV_MERGEABLE);
#else
  (void)p;
  (void)size;
#endif
}
}  // namespace

absl::StatusOr<std::unique_ptr<MemfdGuestMemory>> MemfdGuestMemory::Create(
    std::vector<Range> ranges, Options options) {
  std::unique_ptr<MemfdGuestMemory> mem(new MemfdGuestMemory());
  const uint64_t align = options.hugepages ? kHugePageSize : kPageSize;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Range& range = ranges[i];
    if (range.size == 0 || range.size % align != 0 || range.gpa % align != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "guest RAM region %d [0x%x, +0x%x) must be non-empty and %d-byte aligned", i,
          range.gpa, range.size, align));
    }
    unsigned flags = MFD_CLOEXEC;
    if (options.hugepages) flags |= MFD_HUGETLB | MFD_HUGE_2MB;
    ScopedFd fd(::memfd_create(absl::StrFormat("dsec-guest-ram-%d", i).c_str(), flags));
    if (!fd.valid()) return ErrnoToStatus("memfd_create(guest RAM)");
    if (::ftruncate(fd.get(), static_cast<off_t>(range.size)) != 0)
      return ErrnoToStatus("ftruncate(guest RAM memfd)");
    // MAP_NORESERVE: guest RAM is committed lazily, page by page, as the guest
    // touches it.
    DSEC_ASSIGN_OR_RETURN(
        Mmap map, Mmap::File(fd.get(), range.size, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_NORESERVE, 0));
    mem->regions_.push_back(GuestRegion{range.gpa, range.size, map.data()});
    mem->fds_.push_back(std::move(fd));
    mem->maps_.push_back(std::move(map));
  }
  DSEC_RETURN_IF_ERROR(ValidateRegionLayout(mem->regions_));
  return mem;
}

void MemfdGuestMemory::AddPrivateRegion(const Range& range, Mmap map) {
  OfferToKsm(map.data(), range.size);
  regions_.push_back(GuestRegion{range.gpa, range.size, map.data()});
  fds_.emplace_back();
  maps_.push_back(std::move(map));
}

absl::StatusOr<std::unique_ptr<MemfdGuestMemory>> MemfdGuestMemory::MapPrivateFile(
    std::vector<Range> ranges, int file, std::vector<uint64_t> offsets) {
  if (offsets.size() != ranges.size()) {
    return absl::InvalidArgumentError("one file offset per guest RAM region is needed");
  }
  struct stat st;
  if (::fstat(file, &st) != 0) return ErrnoStatus("fstat(guest RAM file)");
  std::unique_ptr<MemfdGuestMemory> mem(new MemfdGuestMemory());
  mem->private_file_ = true;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Range& range = ranges[i];
    if (range.size == 0 || range.size % kPageSize != 0 || range.gpa % kPageSize != 0 ||
        offsets[i] % kPageSize != 0 || offsets[i] > static_cast<uint64_t>(st.st_size) ||
        range.size > static_cast<uint64_t>(st.st_size) - offsets[i]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "guest RAM region %d [0x%x, +0x%x) at file offset 0x%x: not page-aligned, or past the "
          "end of a file of %d bytes",
          i, range.gpa, range.size, offsets[i], st.st_size));
    }
    DSEC_ASSIGN_OR_RETURN(Mmap map, Mmap::File(file, range.size, PROT_READ | PROT_WRITE,
                                               MAP_PRIVATE | MAP_NORESERVE,
                                               static_cast<off_t>(offsets[i])));
    mem->AddPrivateRegion(range, std::move(map));
  }
  DSEC_RETURN_IF_ERROR(ValidateRegionLayout(mem->regions_));
  return mem;
}

absl::StatusOr<std::unique_ptr<MemfdGuestMemory>> MemfdGuestMemory::MapAnonymous(
    std::vector<Range> ranges) {
  std::unique_ptr<MemfdGuestMemory> mem(new MemfdGuestMemory());
  mem->private_file_ = true;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Range& range = ranges[i];
    if (range.size == 0 || range.size % kPageSize != 0 || range.gpa % kPageSize != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "guest RAM region %d [0x%x, +0x%x) must be non-empty and page-aligned", i, range.gpa,
          range.size));
    }
    DSEC_ASSIGN_OR_RETURN(Mmap map, Mmap::Anonymous(range.size, PROT_READ | PROT_WRITE, MAP_NORESERVE));
    mem->AddPrivateRegion(range, std::move(map));
  }
  DSEC_RETURN_IF_ERROR(ValidateRegionLayout(mem->regions_));
  return mem;
}

absl::Status MemfdGuestMemory::OverlayPrivateFile(int file, const std::vector<uint64_t>& offsets,
                                                  const std::vector<Run>& runs) {
  if (!private_file_ || offsets.size() != regions_.size()) {
    return absl::FailedPreconditionError("an overlay needs memory mapped from a snapshot file");
  }
  for (const Run& run : runs) {
    bool placed = false;
    for (size_t i = 0; i < regions_.size() && !placed; ++i) {
      const GuestRegion& r = regions_[i];
      if (run.offset < offsets[i] || run.offset - offsets[i] >= r.size) continue;
      const uint64_t at = run.offset - offsets[i];
      if (run.length > r.size - at || run.offset % kPageSize != 0 || run.length % kPageSize != 0) {
        break;
      }
      void* p = ::mmap(r.host + at, run.length, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_FIXED | MAP_NORESERVE, file, static_cast<off_t>(run.offset));
      if (p == MAP_FAILED) return ErrnoStatus("mmap(snapshot overlay)");
      placed = true;
    }
    if (!placed) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "snapshot overlay run [0x%x, +0x%x) lies outside the guest RAM regions", run.offset,
          run.length));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> MemfdGuestMemory::ResidentBytes() const {
  uint64_t resident = 0;
  std::vector<unsigned char> vec;
  for (const auto& map : maps_) {
    vec.resize((map.size() + kPageSize - 1) / kPageSize);
    if (::mincore(map.data(), map.size(), vec.data()) != 0)
      return ErrnoStatus("mincore(guest RAM)");
    for (unsigned char v : vec) resident += (v & 1) ? kPageSize : 0;
  }
  return resident;
}

}  // namespace dsec::memory
