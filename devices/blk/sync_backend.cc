// SPDX-License-Identifier: Apache-2.0
#include "devices/blk/sync_backend.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

#include "base/status.h"

namespace dsec::devices {

namespace {

// Transfers the whole of `iov` at `offset`, retrying short transfers and
// EINTR. Returns the byte count or -errno; a read that hits end of file
// before the end of the buffers is -EIO (the image shrank under us).
int64_t TransferAll(int fd, uint64_t offset, std::vector<iovec> iov, bool write) {
  const uint64_t total = blk_backend_internal::IovecBytes(iov);
  uint64_t done = 0;
  while (done < total) {
    const int count = static_cast<int>(std::min<size_t>(iov.size(), IOV_MAX));
    const ssize_t n = write ? ::pwritev(fd, iov.data(), count, static_cast<off_t>(offset + done))
                            : ::preadv(fd, iov.data(), count, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (n == 0) return -EIO;
    done += static_cast<uint64_t>(n);
    blk_backend_internal::AdvanceIovecs(iov, static_cast<uint64_t>(n));
  }
  return static_cast<int64_t>(total);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SyncBlkBackend>> SyncBlkBackend::Create(int fd, EventLoop* loop) {
  DSEC_ASSIGN_OR_RETURN(EventFd wake, EventFd::Create(EFD_NONBLOCK));
  std::unique_ptr<SyncBlkBackend> backend(new SyncBlkBackend(fd, loop, std::move(wake)));
  SyncBlkBackend* raw = backend.get();
  DSEC_RETURN_IF_ERROR(loop->Add(raw->wake_.fd(), EPOLLIN, [raw](uint32_t) {
    (void)raw->wake_.Consume();
    raw->RunCompletions();
  }));
  return backend;
}

SyncBlkBackend::~SyncBlkBackend() {
  // Nothing is in the kernel: every operation finished before it was queued.
  (void)loop_->Remove(wake_.fd());
}

void SyncBlkBackend::Complete(Completion done, int64_t result) {
  completed_.emplace_back(std::move(done), result);
  // An eventfd counter cannot overflow from these small increments; a failed
  // signal would only delay delivery until the next one or Drain().
  (void)wake_.Signal();
}

void SyncBlkBackend::RunCompletions() {
  // Run only what was queued before this call; completions queued by the
  // callbacks themselves arrive with their own wake-up.
  size_t n = completed_.size();
  while (n-- > 0 && !completed_.empty()) {
    auto [done, result] = std::move(completed_.front());
    completed_.pop_front();
    done(result);
  }
}

void SyncBlkBackend::Drain() {
  while (!completed_.empty()) RunCompletions();
}

void SyncBlkBackend::Read(uint64_t offset, std::vector<iovec> iov, Completion done) {
  Complete(std::move(done), TransferAll(fd_, offset, std::move(iov), /*write=*/false));
}

void SyncBlkBackend::Write(uint64_t offset, std::vector<iovec> iov, Completion done) {
  Complete(std::move(done), TransferAll(fd_, offset, std::move(iov), /*write=*/true));
}

void SyncBlkBackend::Flush(Completion done) {
  int64_t result = 0;
  while (::fdatasync(fd_) != 0) {
    if (errno == EINTR) continue;
    result = -errno;
    break;
  }
  Complete(std::move(done), result);
}

void SyncBlkBackend::Fallocate(uint64_t offset, uint64_t len, int mode, Completion done) {
  int64_t result = 0;
  if (len > 0) {
    while (::fallocate(fd_, mode, static_cast<off_t>(offset), static_cast<off_t>(len)) != 0) {
      if (errno == EINTR) continue;
      result = -errno;
      break;
    }
  }
  Complete(std::move(done), result);
}

}  // namespace dsec::devices
