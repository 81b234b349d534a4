// SPDX-License-Identifier: Apache-2.0
#include "devices/serial/console_output.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::devices {
namespace {

// Granularity of throttled wake-ups: wait for this many tokens (or fewer if
// less is buffered) rather than waking for every byte.
constexpr uint64_t kThrottleChunk = 4096;
// Ring-to-fd rounds per Drain() call, so that a guest printing as fast as the
// fd accepts cannot monopolise the event loop.
constexpr int kMaxRoundsPerDrain = 16;

bool IsSocket(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

absl::Status SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return ErrnoStatus("fcntl(F_GETFL)");
  if (fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return ErrnoStatus("fcntl(F_SETFL)");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ConsoleOutput>> ConsoleOutput::Create(
    ScopedFd out, const ConsoleOutputOptions& options, const Clock* clock) {
  if (!out.valid()) return absl::InvalidArgumentError("console output: invalid fd");
  if (options.buffer_bytes == 0) {
    return absl::InvalidArgumentError("console output: buffer_bytes must be > 0");
  }
  if (clock == nullptr) return absl::InvalidArgumentError("console output: null clock");
  DSEC_ASSIGN_OR_RETURN(EventFd wake, EventFd::Create(EFD_NONBLOCK));
  const bool is_socket = IsSocket(out.get());
  return std::unique_ptr<ConsoleOutput>(
      new ConsoleOutput(std::move(out), is_socket, std::move(wake), options, clock));
}

ConsoleOutput::ConsoleOutput(ScopedFd out, bool is_socket, EventFd wake,
                             const ConsoleOutputOptions& options, const Clock* clock)
    : out_(std::move(out)),
      is_socket_(is_socket),
      wake_(std::move(wake)),
      options_(options),
      bucket_(options.rate_bytes_per_sec, options.burst_bytes, clock) {
  absl::MutexLock lock(&mu_);
  ring_.resize(options.buffer_bytes);
}

absl::StatusOr<ScopedFd> ConsoleOutput::OpenFile(const std::string& path) {
  ScopedFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640));
  if (!fd.valid()) return ErrnoToStatus(absl::StrFormat("open(%s)", path));
  return fd;
}

absl::StatusOr<ScopedFd> ConsoleOutput::OpenStdout() {
  // O_APPEND: if stdout is a regular file, a fresh description would start at
  // offset 0 and overwrite what the process already wrote there.
  ScopedFd fd(open("/proc/self/fd/1", O_WRONLY | O_APPEND | O_NOCTTY | O_CLOEXEC | O_NONBLOCK));
  if (fd.valid()) return fd;
  fd.Reset(fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus("fcntl(1, F_DUPFD_CLOEXEC)");
  // Sockets are written with MSG_DONTWAIT and keep their flags.
  if (!IsSocket(fd.get())) DSEC_RETURN_IF_ERROR(SetNonBlocking(fd.get()));
  return fd;
}

void ConsoleOutput::Put(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return;
  bytes_in_.fetch_add(bytes.size(), std::memory_order_relaxed);
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    if (capped_) {
      dropped_cap_.fetch_add(bytes.size(), std::memory_order_relaxed);
      return;
    }
    if (broken_) {
      dropped_write_error_.fetch_add(bytes.size(), std::memory_order_relaxed);
      return;
    }
    const size_t cap = ring_.size();
    const size_t take = std::min(bytes.size(), cap - len_);
    if (take < bytes.size()) {
      auto& counter = throttled_ ? dropped_rate_limited_ : dropped_overflow_;
      counter.fetch_add(bytes.size() - take, std::memory_order_relaxed);
    }
    size_t tail = (head_ + len_) % cap;
    const size_t first = std::min(take, cap - tail);
    std::memcpy(ring_.data() + tail, bytes.data(), first);
    std::memcpy(ring_.data(), bytes.data() + first, take - first);
    wake = len_ == 0 && take > 0;
    len_ += take;
  }
  // Only the empty -> non-empty transition needs a wake-up: while the ring is
  // non-empty, a Drain() is already due (wake pending, timer or EPOLLOUT).
  if (wake && !wake_.Signal().ok()) {
    DSEC_LOG_RATELIMITED(warn, 1, "device=console wake signal failed");
  }
}

void ConsoleOutput::MoveFromRing(size_t n) {
  const size_t cap = ring_.size();
  const size_t first = std::min(n, cap - head_);
  pending_.insert(pending_.end(), ring_.begin() + head_, ring_.begin() + head_ + first);
  pending_.insert(pending_.end(), ring_.begin(), ring_.begin() + (n - first));
  head_ = (head_ + n) % cap;
  len_ -= n;
}

ssize_t ConsoleOutput::WriteSome(const uint8_t* data, size_t len) {
  if (is_socket_) return send(out_.get(), data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
  return write(out_.get(), data, len);
}

void ConsoleOutput::FailOutput(int err) {
  DSEC_LOG_RATELIMITED(warn, 1, "device=console output write failed, dropping output: {}",
                       std::strerror(err));
  const size_t unwritten_data =
      pending_data_end_ > pending_off_ ? pending_data_end_ - pending_off_ : 0;
  dropped_write_error_.fetch_add(unwritten_data, std::memory_order_relaxed);
  pending_.clear();
  pending_off_ = pending_data_end_ = 0;
  absl::MutexLock lock(&mu_);
  broken_ = true;
  dropped_write_error_.fetch_add(len_, std::memory_order_relaxed);
  len_ = 0;
}

ConsoleOutput::DrainResult ConsoleOutput::Drain() {
  // Consume the wake-up first: a Put() after this point signals again.
  (void)wake_.Consume();
  for (int round = 0; round < kMaxRoundsPerDrain; ++round) {
    while (pending_off_ < pending_.size()) {
      const ssize_t n = WriteSome(pending_.data() + pending_off_, pending_.size() - pending_off_);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return {.wait_writable = true};
      if (n <= 0) {
        FailOutput(n < 0 ? errno : EIO);
        return {};
      }
      const size_t end = pending_off_ + static_cast<size_t>(n);
      const size_t data_written =
          std::min(end, pending_data_end_) - std::min(pending_off_, pending_data_end_);
      bytes_written_.fetch_add(data_written, std::memory_order_relaxed);
      pending_off_ = end;
    }
    pending_.clear();
    pending_off_ = pending_data_end_ = 0;

    absl::MutexLock lock(&mu_);
    if (len_ == 0 || capped_ || broken_) {
      throttled_ = false;
      return {};
    }
    uint64_t want = len_;
    if (options_.max_total_bytes != 0) {
      want = std::min<uint64_t>(want, options_.max_total_bytes - admitted_);
    }
    const uint64_t granted = bucket_.Take(want);
    if (granted == 0) {
      throttled_ = true;
      const uint64_t chunk = std::min<uint64_t>({len_, bucket_.burst(), kThrottleChunk});
      return {.retry_after_ns = std::max<int64_t>(1, bucket_.NsUntilAvailable(chunk))};
    }
    throttled_ = granted < want;
    MoveFromRing(granted);
    admitted_ += granted;
    pending_data_end_ = pending_.size();
    if (options_.max_total_bytes != 0 && admitted_ == options_.max_total_bytes) {
      capped_ = true;
      dropped_cap_.fetch_add(len_, std::memory_order_relaxed);
      head_ = len_ = 0;
      const std::string marker = absl::StrFormat(
          "\n[dsec-vmm: console output capped at %d bytes; further output dropped]\n",
          options_.max_total_bytes);
      pending_.insert(pending_.end(), marker.begin(), marker.end());
    }
  }
  // Out of rounds with work left: come back after other event sources ran.
  if (!wake_.Signal().ok()) {
    DSEC_LOG_RATELIMITED(warn, 1, "device=console wake signal failed");
  }
  return {};
}

ConsoleOutput::Metrics ConsoleOutput::metrics() const {
  Metrics m;
  m.bytes_in = bytes_in_.load(std::memory_order_relaxed);
  m.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  m.dropped_rate_limited = dropped_rate_limited_.load(std::memory_order_relaxed);
  m.dropped_cap = dropped_cap_.load(std::memory_order_relaxed);
  m.dropped_overflow = dropped_overflow_.load(std::memory_order_relaxed);
  m.dropped_write_error = dropped_write_error_.load(std::memory_order_relaxed);
  return m;
}

size_t ConsoleOutput::buffered_bytes() const {
  absl::MutexLock lock(&mu_);
  return len_;
}

}  // namespace dsec::devices
