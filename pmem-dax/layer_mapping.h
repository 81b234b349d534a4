// SPDX-License-Identifier: Apache-2.0
// The host side of one pmem-DAX layer: an image file mapped MAP_SHARED so
// that every microVM mapping the same file reads the same host page-cache
// pages (no guest page-cache copy, no per-VM copy on the host).
//
// Size: the guest window is the file size rounded up to 2 MiB (Linux maps
// pmem with 2 MiB subsections, and huge guest page-table entries need that
// alignment). The tail past the file's last page is NOT the file: touching a
// file mapping beyond EOF raises SIGBUS (and makes KVM fail the vCPU's
// access), so the tail is a private anonymous zero mapping in the same
// reserved address range. Guest reads there return zeros; guest writes to
// the tail of a writable layer stay private to this VM and are never
// written to the file. A layer image whose size is not a multiple of 2 MiB
// is therefore accepted.
//
// Threads: immutable after Create(); any thread. Lifetime: the mapping must
// outlive any KVM memslot that points at it (VirtioDevices orders them).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "base/mmap.h"
#include "base/scoped_fd.h"

namespace dsec::pmem {

inline constexpr uint64_t kPmemAlignment = 2ull << 20;

// The guest window for a file of `file_size` bytes: rounded up to 2 MiB.
// InvalidArgument for an empty file or one too large to round.
absl::StatusOr<uint64_t> PmemRegionSize(uint64_t file_size);

class LayerMapping {
 public:
  // Opens and maps `path` (O_RDONLY + PROT_READ when read_only, O_RDWR +
  // PROT_READ|PROT_WRITE otherwise). NotFound for a missing file,
  // InvalidArgument for an empty or non-regular file, PermissionDenied when
  // it cannot be opened in the wanted mode.
  static absl::StatusOr<LayerMapping> Create(const std::string& path, bool read_only);

  LayerMapping(LayerMapping&&) = default;
  LayerMapping& operator=(LayerMapping&&) = default;

  const std::string& path() const { return path_; }
  bool read_only() const { return read_only_; }
  int fd() const { return fd_.get(); }
  uint64_t file_size() const { return file_size_; }
  // The guest window (2 MiB multiple); host_addr() points at its start.
  uint64_t region_size() const { return region_.size(); }
  uint8_t* host_addr() const { return region_.data(); }
  // FailedPrecondition if the file's size differs from file_size() now.
  absl::Status CheckSize() const;

 private:
  LayerMapping(std::string path, bool read_only, ScopedFd fd, uint64_t file_size, Mmap region)
      : path_(std::move(path)),
        read_only_(read_only),
        fd_(std::move(fd)),
        file_size_(file_size),
        region_(std::move(region)) {}

  std::string path_;
  bool read_only_ = true;
  ScopedFd fd_;
  uint64_t file_size_ = 0;
  Mmap region_;  // one reservation: file pages, then the anonymous tail
};

}  // namespace dsec::pmem
