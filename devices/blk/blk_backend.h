// SPDX-License-Identifier: Apache-2.0
// The host side of virtio-blk: asynchronous operations on a disk image whose
// completions arrive on the event-loop thread. Two mechanisms implement it:
// IoUringBlkBackend (preferred) and SyncBlkBackend (fallback where io_uring
// is unavailable, e.g. blocked by seccomp or an old kernel).
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "base/event_loop.h"

namespace dsec::devices {

// Threads: every method is called on the event-loop thread, and every
// completion runs there, never inside the call that started the operation
// (so a completion may start new operations). Destroying the backend waits
// for the kernel to finish with in-flight buffers and drops their completions.
class BlkBackend {
 public:
  // result: bytes transferred (the full length: short transfers are retried
  // by the backend) or 0 for flush/discard/write-zeroes; -errno on failure.
  using Completion = std::function<void(int64_t result)>;

  virtual ~BlkBackend() = default;

  // "io_uring" or "sync", for logs and metrics.
  virtual const char* name() const = 0;

  // Vectored I/O at a byte offset. The iovecs point at guest memory, which
  // must stay mapped until the completion runs.
  virtual void Read(uint64_t offset, std::vector<iovec> iov, Completion done) = 0;
  virtual void Write(uint64_t offset, std::vector<iovec> iov, Completion done) = 0;
  // fdatasync.
  virtual void Flush(Completion done) = 0;
  // fallocate(2) with `mode` (FALLOC_FL_*) over [offset, offset + len).
  virtual void Fallocate(uint64_t offset, uint64_t len, int mode, Completion done) = 0;

  // Deallocates a range (fallocate PUNCH_HOLE|KEEP_SIZE); later reads return
  // zeroes. Fails with -EOPNOTSUPP where the file system cannot punch holes.
  void Discard(uint64_t offset, uint64_t len, Completion done);
  // Zeroes a range: fallocate ZERO_RANGE (PUNCH_HOLE when `unmap`); where
  // the file system refuses that mode (-EOPNOTSUPP), ordinary writes of
  // zeroes, and later requests go straight to the writes.
  void WriteZeroes(uint64_t offset, uint64_t len, bool unmap, Completion done);

  // Operations started and not yet completed.
  virtual uint32_t in_flight() const = 0;
  // Blocks until every in-flight operation has finished, running their
  // completions; operations those completions start are waited for too.
  virtual void Drain() = 0;

 private:
  void ZeroByWriting(uint64_t offset, uint64_t len, Completion done);

  bool zero_range_unsupported_ = false;
  bool punch_hole_unsupported_ = false;
};

// Which mechanism to use.
enum class BlkBackendKind { kAuto, kIoUring, kSync };

// Creates a backend for `fd` (not owned; must outlive the backend). kAuto
// tries io_uring and falls back to the synchronous backend, logging which one
// is in use. `depth` bounds io_uring submissions in flight.
absl::StatusOr<std::unique_ptr<BlkBackend>> CreateBlkBackend(BlkBackendKind kind, int fd,
                                                             EventLoop* loop, uint32_t depth);

// Helpers shared by the backends.
namespace blk_backend_internal {

// Drops the first `n` bytes of `iov` (after a short transfer).
void AdvanceIovecs(std::vector<iovec>& iov, uint64_t n);
uint64_t IovecBytes(const std::vector<iovec>& iov);
// Up to `len` bytes (at most kZeroChunkBytes) of iovecs pointing at a
// shared zero buffer, for the write-zeroes fallback.
inline constexpr uint64_t kZeroChunkBytes = 1 << 20;
std::vector<iovec> ZeroIovecs(uint64_t len);

}  // namespace blk_backend_internal

}  // namespace dsec::devices
