// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "devices/blk/blk_backend.h"
#include "base/event_loop.h"
#include "base/eventfd.h"

namespace dsec::devices {

// The fallback backend: preadv/pwritev/fdatasync/fallocate run synchronously
// on the event-loop thread when an operation is started, and the completion
// is queued and delivered from the loop through an eventfd (so completions
// never run inside the call that started them, as with io_uring). It stalls
// the loop for the duration of each syscall; it exists for hosts where
// io_uring cannot be used.
//
// Threads: event-loop thread only. Lives no longer than the loop.
class SyncBlkBackend : public BlkBackend {
 public:
  static absl::StatusOr<std::unique_ptr<SyncBlkBackend>> Create(int fd, EventLoop* loop);
  ~SyncBlkBackend() override;

  const char* name() const override { return "sync"; }
  void Read(uint64_t offset, std::vector<iovec> iov, Completion done) override;
  void Write(uint64_t offset, std::vector<iovec> iov, Completion done) override;
  void Flush(Completion done) override;
  void Fallocate(uint64_t offset, uint64_t len, int mode, Completion done) override;
  uint32_t in_flight() const override { return static_cast<uint32_t>(completed_.size()); }
  void Drain() override;

 private:
  SyncBlkBackend(int fd, EventLoop* loop, EventFd wake)
      : fd_(fd), loop_(loop), wake_(std::move(wake)) {}
  void Complete(Completion done, int64_t result);
  void RunCompletions();

  const int fd_;
  EventLoop* const loop_;
  EventFd wake_;
  std::deque<std::pair<Completion, int64_t>> completed_;
};

}  // namespace dsec::devices
