// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "base/scoped_fd.h"

namespace dsec::devices {

// A raw disk image (a regular file or a block device) opened for one VM.
//
// Read-write images are opened O_RDWR and locked with an exclusive flock, so
// two VMs (or two devices of one VM) cannot write the same image; read-only
// images are opened O_RDONLY with a shared flock, so any number of readers
// may share an image but never with a writer. The lock lives as long as the
// descriptor. The capacity is the size rounded down to 512-byte sectors; a
// tail shorter than a sector is not visible to the guest.
//
// Threads: immutable after Open(); any thread may call the accessors.
class DiskImage {
 public:
  // InvalidArgument: not a regular file or block device, or smaller than one
  // sector. FailedPrecondition: locked by another user. NotFound /
  // PermissionDenied from open(2).
  static absl::StatusOr<DiskImage> Open(const std::string& path, bool read_only);

  DiskImage(DiskImage&&) = default;
  DiskImage& operator=(DiskImage&&) = default;

  int fd() const { return fd_.get(); }
  bool read_only() const { return read_only_; }
  uint64_t capacity_sectors() const { return capacity_sectors_; }
  uint64_t size_bytes() const { return size_bytes_; }
  const std::string& path() const { return path_; }

 private:
  DiskImage(ScopedFd fd, std::string path, bool read_only, uint64_t size_bytes)
      : fd_(std::move(fd)),
        path_(std::move(path)),
        read_only_(read_only),
        size_bytes_(size_bytes),
        capacity_sectors_(size_bytes / 512) {}

  ScopedFd fd_;
  std::string path_;
  bool read_only_ = false;
  uint64_t size_bytes_ = 0;
  uint64_t capacity_sectors_ = 0;
};

}  // namespace dsec::devices
