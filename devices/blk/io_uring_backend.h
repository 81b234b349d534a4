// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <liburing.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "devices/blk/blk_backend.h"
#include "base/event_loop.h"
#include "base/eventfd.h"

namespace dsec::devices {

// The io_uring backend: readv/writev/fsync(DATASYNC)/fallocate submitted to
// a ring, completions signalled to the event loop through an eventfd
// registered with io_uring_register_eventfd. At most `depth` operations are
// in the kernel at once; further ones wait in a host-side backlog and are
// submitted as earlier ones complete. Short transfers and -EAGAIN are
// resubmitted for the remainder.
//
// Threads: event-loop thread only (the ring is not shared). Lives no longer
// than the loop; the destructor waits for the kernel to finish every
// in-flight operation (their buffers are guest memory) and drops their
// completions.
class IoUringBlkBackend : public BlkBackend {
 public:
  // Unavailable if the kernel refuses io_uring (ENOSYS, seccomp EPERM, ...).
  static absl::StatusOr<std::unique_ptr<IoUringBlkBackend>> Create(int fd, EventLoop* loop,
                                                                   uint32_t depth);
  ~IoUringBlkBackend() override;

  const char* name() const override { return "io_uring"; }
  void Read(uint64_t offset, std::vector<iovec> iov, Completion done) override;
  void Write(uint64_t offset, std::vector<iovec> iov, Completion done) override;
  void Flush(Completion done) override;
  void Fallocate(uint64_t offset, uint64_t len, int mode, Completion done) override;
  uint32_t in_flight() const override;
  void Drain() override;

 private:
  enum class OpKind { kRead, kWrite, kFsync, kFallocate, kNop };
  struct Op {
    OpKind kind;
    uint64_t offset = 0;
    std::vector<iovec> iov;  // what is left to transfer
    uint64_t total = 0;      // bytes requested (read/write)
    uint64_t done_bytes = 0;
    uint64_t len = 0;        // fallocate
    int mode = 0;            // fallocate
    Completion done;
  };

  IoUringBlkBackend(int fd, EventLoop* loop, uint32_t depth, EventFd wake)
      : fd_(fd), loop_(loop), depth_(depth), wake_(std::move(wake)) {}

  void Start(std::unique_ptr<Op> op);
  // Puts `op` (owned by ops_) into the ring, or into the backlog when the
  // depth bound is reached.
  void Submit(Op* op);
  void SubmitBacklog();
  // Reaps every available completion.
  void Reap();
  void Handle(Op* op, int res);
  void Finish(Op* op, int64_t result);

  const int fd_;
  EventLoop* const loop_;
  const uint32_t depth_;
  EventFd wake_;
  io_uring ring_{};
  bool ring_ready_ = false;
  uint32_t submitted_ = 0;  // operations in the kernel
  std::deque<Op*> backlog_;
  std::unordered_map<Op*, std::unique_ptr<Op>> ops_;  // every live operation
  bool destroying_ = false;
};

}  // namespace dsec::devices
