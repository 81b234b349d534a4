// SPDX-License-Identifier: Apache-2.0
#include "devices/blk/io_uring_backend.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::devices {

namespace {

constexpr uint32_t kMaxDepth = 4096;

// Unavailable unless the ring supports every opcode this backend uses
// (IORING_OP_FALLOCATE needs Linux 5.6).
absl::Status CheckOpcodes(io_uring* ring) {
  io_uring_probe* probe = io_uring_get_probe_ring(ring);
  if (probe == nullptr) return absl::UnavailableError("io_uring probe failed");
  absl::Status status;
  for (int op : {IORING_OP_READV, IORING_OP_WRITEV, IORING_OP_FSYNC, IORING_OP_FALLOCATE,
                 IORING_OP_NOP}) {
    if (!io_uring_opcode_supported(probe, op)) {
      status = absl::UnavailableError(absl::StrCat("io_uring opcode ", op, " unsupported"));
      break;
    }
  }
  io_uring_free_probe(probe);
  return status;
}

}  // namespace

absl::StatusOr<std::unique_ptr<IoUringBlkBackend>> IoUringBlkBackend::Create(int fd,
                                                                           EventLoop* loop,
                                                                           uint32_t depth) {
  depth = std::clamp<uint32_t>(depth, 1, kMaxDepth);
  DSEC_ASSIGN_OR_RETURN(EventFd wake, EventFd::Create(EFD_NONBLOCK));
  std::unique_ptr<IoUringBlkBackend> b(new IoUringBlkBackend(fd, loop, depth, std::move(wake)));
  if (int r = io_uring_queue_init(depth, &b->ring_, 0); r < 0) {
    return absl::UnavailableError(ErrnoStatus("io_uring_queue_init", -r).message());
  }
  b->ring_ready_ = true;
  DSEC_RETURN_IF_ERROR(CheckOpcodes(&b->ring_));
  if (int r = io_uring_register_eventfd(&b->ring_, b->wake_.fd()); r < 0) {
    return ErrnoStatus("io_uring_register_eventfd", -r);
  }
  IoUringBlkBackend* raw = b.get();
  DSEC_RETURN_IF_ERROR(loop->Add(raw->wake_.fd(), EPOLLIN, [raw](uint32_t) {
    (void)raw->wake_.Consume();
    raw->Reap();
  }));
  return b;
}

IoUringBlkBackend::~IoUringBlkBackend() {
  if (!ring_ready_) return;
  destroying_ = true;
  backlog_.clear();
  // The kernel may still be copying into guest memory: wait for it.
  while (submitted_ > 0) {
    if (io_uring_sq_ready(&ring_) > 0) (void)io_uring_submit(&ring_);
    io_uring_cqe* cqe = nullptr;
    int r = io_uring_wait_cqe(&ring_, &cqe);
    if (r == -EINTR) continue;
    if (r < 0) {
      DSEC_LOG(err, "device=blk backend=io_uring wait_cqe failed while draining: {}", -r);
      break;
    }
    Reap();
  }
  (void)loop_->Remove(wake_.fd());
  (void)io_uring_unregister_eventfd(&ring_);
  io_uring_queue_exit(&ring_);
}

uint32_t IoUringBlkBackend::in_flight() const { return static_cast<uint32_t>(ops_.size()); }

void IoUringBlkBackend::Read(uint64_t offset, std::vector<iovec> iov, Completion done) {
  auto op = std::make_unique<Op>();
  op->kind = OpKind::kRead;
  op->offset = offset;
  op->total = blk_backend_internal::IovecBytes(iov);
  op->iov = std::move(iov);
  op->done = std::move(done);
  Start(std::move(op));
}

void IoUringBlkBackend::Write(uint64_t offset, std::vector<iovec> iov, Completion done) {
  auto op = std::make_unique<Op>();
  op->kind = OpKind::kWrite;
  op->offset = offset;
  op->total = blk_backend_internal::IovecBytes(iov);
  op->iov = std::move(iov);
  op->done = std::move(done);
  Start(std::move(op));
}

void IoUringBlkBackend::Flush(Completion done) {
  auto op = std::make_unique<Op>();
  op->kind = OpKind::kFsync;
  op->done = std::move(done);
  Start(std::move(op));
}

void IoUringBlkBackend::Fallocate(uint64_t offset, uint64_t len, int mode, Completion done) {
  auto op = std::make_unique<Op>();
  op->kind = OpKind::kFallocate;
  op->offset = offset;
  op->len = len;
  op->mode = mode;
  op->done = std::move(done);
  Start(std::move(op));
}

void IoUringBlkBackend::Start(std::unique_ptr<Op> op) {
  // Zero-length transfers (and fallocate, which refuses len 0) still
  // complete asynchronously, through a NOP.
  if ((op->kind == OpKind::kRead || op->kind == OpKind::kWrite) && op->total == 0) {
    op->kind = OpKind::kNop;
  }
  if (op->kind == OpKind::kFallocate && op->len == 0) op->kind = OpKind::kNop;
  Op* raw = op.get();
  ops_.emplace(raw, std::move(op));
  Submit(raw);
}

void IoUringBlkBackend::Submit(Op* op) {
  if (submitted_ >= depth_) {
    backlog_.push_back(op);
    return;
  }
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    backlog_.push_back(op);
    return;
  }
  const uint64_t pos = op->offset + op->done_bytes;
  const unsigned nr_vecs = static_cast<unsigned>(std::min<size_t>(op->iov.size(), IOV_MAX));
  switch (op->kind) {
    case OpKind::kRead:
      io_uring_prep_readv(sqe, fd_, op->iov.data(), nr_vecs, pos);
      break;
    case OpKind::kWrite:
      io_uring_prep_writev(sqe, fd_, op->iov.data(), nr_vecs, pos);
      break;
    case OpKind::kFsync:
      io_uring_prep_fsync(sqe, fd_, IORING_FSYNC_DATASYNC);
      break;
    case OpKind::kFallocate:
      io_uring_prep_fallocate(sqe, fd_, op->mode, op->offset, op->len);
      break;
    case OpKind::kNop:
      io_uring_prep_nop(sqe);
      break;
  }
  io_uring_sqe_set_data(sqe, op);
  ++submitted_;
  // A failed io_uring_enter leaves the SQE in the submission ring; the next
  // submit (or the drain in the destructor) flushes it.
  if (int r = io_uring_submit(&ring_); r < 0) {
    DSEC_LOG_RATELIMITED(warn, 1, "device=blk backend=io_uring io_uring_submit: {}", -r);
  }
}

void IoUringBlkBackend::SubmitBacklog() {
  while (!backlog_.empty() && submitted_ < depth_) {
    Op* op = backlog_.front();
    backlog_.pop_front();
    Submit(op);
  }
}

void IoUringBlkBackend::Reap() {
  io_uring_cqe* cqe = nullptr;
  // One completion at a time: a callback may submit, which touches the ring.
  while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
    Op* op = static_cast<Op*>(io_uring_cqe_get_data(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    Handle(op, res);
  }
  if (!destroying_) {
    SubmitBacklog();
    if (io_uring_sq_ready(&ring_) > 0) (void)io_uring_submit(&ring_);
  }
}

void IoUringBlkBackend::Handle(Op* op, int res) {
  --submitted_;
  if (destroying_) {
    ops_.erase(op);
    return;
  }
  if (res == -EAGAIN || res == -EINTR) {
    Submit(op);
    return;
  }
  switch (op->kind) {
    case OpKind::kRead:
    case OpKind::kWrite:
      if (res < 0) {
        Finish(op, res);
      } else if (res == 0) {
        // End of file before the end of the buffers: the image shrank.
        Finish(op, -EIO);
      } else {
        op->done_bytes += static_cast<uint64_t>(res);
        blk_backend_internal::AdvanceIovecs(op->iov, static_cast<uint64_t>(res));
        if (op->done_bytes < op->total) {
          Submit(op);
        } else {
          Finish(op, static_cast<int64_t>(op->total));
        }
      }
      break;
    case OpKind::kFsync:
    case OpKind::kFallocate:
    case OpKind::kNop:
      Finish(op, res < 0 ? res : 0);
      break;
  }
}

void IoUringBlkBackend::Finish(Op* op, int64_t result) {
  auto it = ops_.find(op);
  Completion done = std::move(it->second->done);
  ops_.erase(it);
  done(result);
}

void IoUringBlkBackend::Drain() {
  while (!ops_.empty()) {
    SubmitBacklog();
    if (submitted_ == 0) break;  // unreachable: a live op is queued or in the kernel
    io_uring_cqe* cqe = nullptr;
    int r = io_uring_wait_cqe(&ring_, &cqe);
    if (r == -EINTR) continue;
    if (r < 0) {
      DSEC_LOG(err, "device=blk backend=io_uring wait_cqe failed while draining: {}", -r);
      return;
    }
    Reap();
  }
}

}  // namespace dsec::devices
