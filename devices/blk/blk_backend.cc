// SPDX-License-Identifier: Apache-2.0
#include "devices/blk/blk_backend.h"

#include <fcntl.h>
#include <linux/falloc.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "devices/blk/io_uring_backend.h"
#include "devices/blk/sync_backend.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::devices {

namespace blk_backend_internal {

void AdvanceIovecs(std::vector<iovec>& iov, uint64_t n) {
  size_t drop = 0;
  while (drop < iov.size() && n >= iov[drop].iov_len) {
    n -= iov[drop].iov_len;
    ++drop;
  }
  iov.erase(iov.begin(), iov.begin() + static_cast<std::ptrdiff_t>(drop));
  if (!iov.empty() && n > 0) {
    iov[0].iov_base = static_cast<uint8_t*>(iov[0].iov_base) + n;
    iov[0].iov_len -= n;
  }
}

uint64_t IovecBytes(const std::vector<iovec>& iov) {
  uint64_t total = 0;
  for (const iovec& v : iov) total += v.iov_len;
  return total;
}

std::vector<iovec> ZeroIovecs(uint64_t len) {
  // One 64 KiB buffer of zeroes, referenced by every iovec; the kernel only
  // reads from it.
  static constexpr uint64_t kZeroBufferBytes = 64 * 1024;
  alignas(4096) static const uint8_t kZeroes[kZeroBufferBytes] = {};
  len = std::min(len, kZeroChunkBytes);
  std::vector<iovec> out;
  while (len > 0) {
    const uint64_t here = std::min(len, kZeroBufferBytes);
    out.push_back(iovec{const_cast<uint8_t*>(kZeroes), static_cast<size_t>(here)});
    len -= here;
  }
  return out;
}

}  // namespace blk_backend_internal

void BlkBackend::Discard(uint64_t offset, uint64_t len, Completion done) {
  Fallocate(offset, len, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, std::move(done));
}

void BlkBackend::WriteZeroes(uint64_t offset, uint64_t len, bool unmap, Completion done) {
  // A punched hole reads back as zeroes, so it is a valid way to zero when
  // the driver allows deallocation (virtio 1.2 section 5.2.6.2).
  const bool punch = unmap && !punch_hole_unsupported_;
  if (!punch && zero_range_unsupported_) {
    ZeroByWriting(offset, len, std::move(done));
    return;
  }
  const int mode = punch ? (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)
                         : (FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE);
  Fallocate(offset, len, mode, [this, offset, len, punch, done = std::move(done)](int64_t res) {
    if (res != -EOPNOTSUPP) {
      done(res);
      return;
    }
    DSEC_LOG(info, "device=blk backend={} fallocate({}) unsupported, writing zeroes instead",
             name(), punch ? "PUNCH_HOLE" : "ZERO_RANGE");
    (punch ? punch_hole_unsupported_ : zero_range_unsupported_) = true;
    ZeroByWriting(offset, len, done);
  });
}

void BlkBackend::ZeroByWriting(uint64_t offset, uint64_t len, Completion done) {
  if (len == 0) {
    // Completions never run inside the call that started the operation, so
    // route even an empty request through the backend.
    Write(offset, {}, std::move(done));
    return;
  }
  std::vector<iovec> chunk = blk_backend_internal::ZeroIovecs(len);
  const uint64_t n = blk_backend_internal::IovecBytes(chunk);
  Write(offset, std::move(chunk), [this, offset, len, n, done = std::move(done)](int64_t res) {
    if (res < 0) {
      done(res);
      return;
    }
    if (n == len) {
      done(0);
      return;
    }
    ZeroByWriting(offset + n, len - n, done);
  });
}

absl::StatusOr<std::unique_ptr<BlkBackend>> CreateBlkBackend(BlkBackendKind kind, int fd,
                                                             EventLoop* loop, uint32_t depth) {
  if (kind != BlkBackendKind::kSync) {
    absl::StatusOr<std::unique_ptr<IoUringBlkBackend>> uring =
        IoUringBlkBackend::Create(fd, loop, depth);
    if (uring.ok()) {
      DSEC_LOG(info, "device=blk backend=io_uring depth={}", depth);
      return std::unique_ptr<BlkBackend>(std::move(*uring));
    }
    if (kind == BlkBackendKind::kIoUring) return uring.status();
    DSEC_LOG(warn, "device=blk backend=sync reason=\"io_uring unavailable: {}\"",
             std::string(uring.status().message()));
  } else {
    DSEC_LOG(info, "device=blk backend=sync reason=requested");
  }
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<SyncBlkBackend> sync, SyncBlkBackend::Create(fd, loop));
  return std::unique_ptr<BlkBackend>(std::move(sync));
}

}  // namespace dsec::devices
