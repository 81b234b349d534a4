// SPDX-License-Identifier: Apache-2.0
// Frame I/O on a connected stream socket with deadlines: blocking calls for
// request/response code, and non-blocking pieces (ReadSome/Pop, Queue/
// FlushSome) for loops that poll the socket next to other descriptors.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "guest-kernel/agent/protocol.h"
#include "base/clock.h"
#include "base/scoped_fd.h"

namespace dsec::agent {

inline constexpr int64_t kNoDeadline = std::numeric_limits<int64_t>::max();
// Time comes from dsec::MonotonicNowNs (base/clock.h).
// Now + ms (saturating); a negative ms means no deadline.
int64_t DeadlineAfterMs(int64_t ms);

// Waits until `fd` reports one of `events` (returns the revents), the
// deadline passes (DeadlineExceeded) or `cancel_fd` (if >= 0) becomes
// readable (Cancelled).
absl::StatusOr<short> WaitFd(int fd, short events, int64_t deadline_ns, int cancel_fd = -1);

// Threads: one owner thread at a time.
class FrameConn {
 public:
  // Takes a connected stream socket and makes it non-blocking.
  explicit FrameConn(ScopedFd fd, uint32_t max_payload = kMaxFramePayload);

  int fd() const { return fd_.get(); }

  // Blocks for the next frame. Unavailable when the peer closed the
  // connection, InvalidArgument for a malformed frame, DeadlineExceeded,
  // Cancelled (cancel_fd readable).
  absl::StatusOr<Frame> Read(int64_t deadline_ns, int cancel_fd = -1);
  // Queue + Flush.
  absl::Status Write(const Frame& frame, int64_t deadline_ns, int cancel_fd = -1);

  // Appends a frame to the output buffer; InvalidArgument if its payload is
  // over the frame limit.
  absl::Status Queue(const Frame& frame);
  size_t queued_bytes() const { return out_.size() - out_off_; }
  // Writes what the socket takes now without blocking.
  absl::Status FlushSome();
  // Writes the whole buffer. With read_while_waiting, bytes that arrive
  // meanwhile are taken into the reader (for Pop/Read later), so two peers
  // that both write cannot deadlock.
  absl::Status Flush(int64_t deadline_ns, int cancel_fd = -1, bool read_while_waiting = false);

  // Reads what is available now (one read of up to 64 KiB) into the reader.
  // OK with nothing read if nothing was available; sets peer_closed() at EOF.
  absl::Status ReadSome();
  // The next buffered complete frame, nullopt if none, or the reader's error.
  absl::StatusOr<std::optional<Frame>> Pop() { return reader_.Next(); }
  // The next frame if what is buffered and what the socket holds now make
  // one, without waiting: nullopt if not (yet). Errors as Read's.
  absl::StatusOr<std::optional<Frame>> ReadReady();
  bool peer_closed() const { return eof_; }

  // shutdown(2) of the socket (SHUT_WR: the peer reads EOF).
  void Shutdown(int how);

 private:
  ScopedFd fd_;
  FrameReader reader_;
  const uint32_t max_payload_;
  std::string out_;
  size_t out_off_ = 0;
  bool eof_ = false;
};

}  // namespace dsec::agent
