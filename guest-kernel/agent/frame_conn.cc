// SPDX-License-Identifier: Apache-2.0
#include "guest-kernel/agent/frame_conn.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/status.h"

namespace dsec::agent {

int64_t DeadlineAfterMs(int64_t ms) {
  if (ms < 0) return kNoDeadline;
  int64_t now = MonotonicNowNs();
  if (ms > (kNoDeadline - now) / 1'000'000) return kNoDeadline;
  return now + ms * 1'000'000;
}

absl::StatusOr<short> WaitFd(int fd, short events, int64_t deadline_ns, int cancel_fd) {
  for (;;) {
    pollfd fds[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
    int timeout_ms = -1;
    if (deadline_ns != kNoDeadline) {
      int64_t left = deadline_ns - MonotonicNowNs();
      if (left <= 0) return absl::DeadlineExceededError("timed out waiting for the peer");
      // Round up so that we never wake just before the deadline and spin.
      int64_t ms = (left + 999'999) / 1'000'000;
      timeout_ms = ms > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(ms);
    }
    int n = poll(fds, cancel_fd >= 0 ? 2 : 1, timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("poll");
    }
    if (cancel_fd >= 0 && (fds[1].revents & POLLIN) != 0) {
      return absl::CancelledError("cancelled");
    }
    if (fds[0].revents != 0) return fds[0].revents;
  }
}

FrameConn::FrameConn(ScopedFd fd, uint32_t max_payload)
    : fd_(std::move(fd)), reader_(max_payload), max_payload_(max_payload) {
  int flags = fcntl(fd_.get(), F_GETFL);
  if (flags >= 0) fcntl(fd_.get(), F_SETFL, flags | O_NONBLOCK);
}

absl::Status FrameConn::ReadSome() {
  if (eof_) return absl::OkStatus();
  char buf[64 << 10];
  for (;;) {
    ssize_t n = recv(fd_.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && errno == ENOTSOCK) n = read(fd_.get(), buf, sizeof(buf));
    if (n > 0) {
      reader_.Append(std::string_view(buf, static_cast<size_t>(n)));
      return absl::OkStatus();
    }
    if (n == 0) {
      eof_ = true;
      return absl::OkStatus();
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::OkStatus();
    if (errno == ECONNRESET || errno == EPIPE) {
      eof_ = true;
      return absl::OkStatus();
    }
    return ErrnoStatus("recv");
  }
}

absl::StatusOr<Frame> FrameConn::Read(int64_t deadline_ns, int cancel_fd) {
  for (;;) {
    absl::StatusOr<std::optional<Frame>> next = reader_.Next();
    if (!next.ok()) return next.status();
    if (next->has_value()) return std::move(**next);
    if (eof_) {
      if (reader_.buffered() > 0) {
        return absl::UnavailableError("connection closed in the middle of a frame");
      }
      return absl::UnavailableError("connection closed by peer");
    }
    absl::StatusOr<short> ready = WaitFd(fd_.get(), POLLIN, deadline_ns, cancel_fd);
    if (!ready.ok()) return ready.status();
    DSEC_RETURN_IF_ERROR(ReadSome());
  }
}

absl::StatusOr<std::optional<Frame>> FrameConn::ReadReady() {
  for (;;) {
    absl::StatusOr<std::optional<Frame>> next = reader_.Next();
    if (!next.ok() || next->has_value()) return next;
    if (eof_) {
      return absl::UnavailableError(reader_.buffered() > 0 ? "connection closed in the middle of a frame"
                                                           : "connection closed by peer");
    }
    const size_t before = reader_.buffered();
    DSEC_RETURN_IF_ERROR(ReadSome());
    if (reader_.buffered() == before && !eof_) return std::nullopt;  // nothing more here now
  }
}

absl::Status FrameConn::Queue(const Frame& frame) {
  if (frame.payload.size() > max_payload_) {
    return absl::InvalidArgumentError(
        absl::StrCat("protocol: ", TypeName(frame.type), " of ", frame.payload.size(),
                     " bytes exceeds the frame limit of ", max_payload_));
  }
  if (out_off_ > 0 && out_off_ >= out_.size() / 2) {
    out_.erase(0, out_off_);
    out_off_ = 0;
  }
  AppendFrame(frame, &out_);
  return absl::OkStatus();
}

absl::Status FrameConn::FlushSome() {
  while (out_off_ < out_.size()) {
    ssize_t n = send(fd_.get(), out_.data() + out_off_, out_.size() - out_off_,
                     MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK)
      n = write(fd_.get(), out_.data() + out_off_, out_.size() - out_off_);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::OkStatus();
      if (errno == EPIPE || errno == ECONNRESET) {
        return absl::UnavailableError("connection closed by peer");
      }
      return ErrnoStatus("send");
    }
    out_off_ += static_cast<size_t>(n);
  }
  out_.clear();
  out_off_ = 0;
  return absl::OkStatus();
}

absl::Status FrameConn::Flush(int64_t deadline_ns, int cancel_fd, bool read_while_waiting) {
  for (;;) {
    DSEC_RETURN_IF_ERROR(FlushSome());
    if (queued_bytes() == 0) return absl::OkStatus();
    short events = POLLOUT;
    if (read_while_waiting && !eof_) events |= POLLIN;
    absl::StatusOr<short> ready = WaitFd(fd_.get(), events, deadline_ns, cancel_fd);
    if (!ready.ok()) return ready.status();
    if (read_while_waiting && (*ready & POLLIN) != 0) DSEC_RETURN_IF_ERROR(ReadSome());
  }
}

absl::Status FrameConn::Write(const Frame& frame, int64_t deadline_ns, int cancel_fd) {
  DSEC_RETURN_IF_ERROR(Queue(frame));
  return Flush(deadline_ns, cancel_fd);
}

void FrameConn::Shutdown(int how) { shutdown(fd_.get(), how); }

}  // namespace dsec::agent
