// SPDX-License-Identifier: Apache-2.0
// The host side of virtio-pmem behind the device: making the guest's writes
// to the mapped file durable, and noticing when the file under a live
// mapping changed size.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/scoped_fd.h"

namespace dsec::devices {

// Threads: Flush() runs on the device's flush worker thread and may block
// for as long as the disk takes; CheckSize() runs on the event loop (one
// fstat) or the worker. Implementations must allow those two concurrently.
class PmemBackend {
 public:
  virtual ~PmemBackend() = default;
  // Makes every write the guest made through the mapping durable
  // (fdatasync of the backing file: MAP_SHARED pages are the file's page
  // cache, so syncing the file syncs them).
  virtual absl::Status Flush() = 0;
  // FailedPrecondition when the file no longer has the size it had when it
  // was mapped (truncated or extended under the guest).
  virtual absl::Status CheckSize() = 0;
};

// fdatasync(2)/fstat(2) on a file descriptor of the mapped file.
class FilePmemBackend : public PmemBackend {
 public:
  // Keeps its own duplicate of `fd`; `expected_size` is the size at mapping
  // time.
  static absl::StatusOr<std::unique_ptr<FilePmemBackend>> Create(int fd, uint64_t expected_size);
  absl::Status Flush() override;
  absl::Status CheckSize() override;

 private:
  FilePmemBackend(ScopedFd fd, uint64_t expected_size)
      : fd_(std::move(fd)), expected_size_(expected_size) {}
  ScopedFd fd_;
  const uint64_t expected_size_;
};

}  // namespace dsec::devices
