// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "devices/serial/byte_sink.h"
#include "base/clock.h"
#include "base/eventfd.h"
#include "base/scoped_fd.h"
#include "base/token_bucket.h"

namespace dsec::devices {

struct ConsoleOutputOptions {
  // Bytes buffered between the vCPUs and the event loop; beyond this, output
  // is dropped and counted. Another buffer of the same size holds bytes the
  // output fd has not accepted yet.
  size_t buffer_bytes = 64 * 1024;
  // Output rate limit; 0 = unlimited. burst 0 = one second's worth.
  uint64_t rate_bytes_per_sec = 0;
  uint64_t burst_bytes = 0;
  // Total guest bytes ever written; 0 = no cap. The cap marker line does not
  // count towards it.
  uint64_t max_total_bytes = 0;
};

// The console's ByteSink: guest UART output on its way to a file or stdout.
//
// Threads: Put() runs on vCPU threads (under the UART's lock): it copies into
// a bounded ring under a short mutex and never blocks or does I/O; it signals
// wake_fd() only when the ring goes from empty to non-empty. Everything else
// (Drain, the token bucket, the output fd) belongs to the event-loop thread:
//
//   loop.Add(console->wake_fd(), EPOLLIN, [&](uint32_t) { Handle(console->Drain()); });
//
// where Handle arms a one-shot timer for retry_after_ns, or watches the output
// fd for EPOLLOUT when wait_writable, and calls Drain() again when it fires.
//
// Where bytes go (counters, all monotonic): every byte given to Put counts in
// bytes_in and ends, once drained, in exactly one of bytes_written,
// dropped_rate_limited (the ring was full while output was throttled by the
// rate limit), dropped_overflow (the ring was full because the fd or the
// event loop was behind), dropped_cap (past max_total_bytes), or
// dropped_write_error (the fd failed, e.g. EPIPE; output then stops for good).
class ConsoleOutput : public ByteSink {
 public:
  struct Metrics {
    uint64_t bytes_in = 0;
    uint64_t bytes_written = 0;
    uint64_t dropped_rate_limited = 0;
    uint64_t dropped_cap = 0;
    uint64_t dropped_overflow = 0;
    uint64_t dropped_write_error = 0;
  };

  struct DrainResult {
    // > 0: output is throttled; call Drain() again after this many ns.
    int64_t retry_after_ns = 0;
    // The fd would block; call Drain() again once it is writable (EPOLLOUT).
    bool wait_writable = false;
  };

  // Takes ownership of `out`. InvalidArgument for an invalid fd or a zero
  // buffer size. The clock must outlive the object.
  static absl::StatusOr<std::unique_ptr<ConsoleOutput>> Create(
      ScopedFd out, const ConsoleOutputOptions& options,
      const Clock* clock = &MonotonicClock::Get());

  // Opens `path` for writing (O_CREAT|O_TRUNC, mode 0640).
  static absl::StatusOr<ScopedFd> OpenFile(const std::string& path);
  // A non-blocking descriptor for this process's stdout. It reopens
  // /proc/self/fd/1 (O_APPEND) to get its own open file description, so that
  // O_NONBLOCK does not leak into fd 1. If that fails (stdout is a socket, or
  // /proc is missing) it falls back to dup(1): sockets are then written with
  // send(MSG_DONTWAIT) without changing their flags; anything else gets
  // O_NONBLOCK on the shared description.
  static absl::StatusOr<ScopedFd> OpenStdout();

  void Put(std::span<const uint8_t> bytes) override;
  using ByteSink::Put;

  // Readable when there is output to drain. Event-loop thread.
  int wake_fd() const { return wake_.fd(); }
  // Moves buffered output to the fd as far as the rate limit, the cap and the
  // fd allow. Event-loop thread only. When it returns {0, false} it needs no
  // call until wake_fd() is readable again.
  DrainResult Drain();

  Metrics metrics() const;
  // Bytes waiting in the vCPU-side ring (for tests and metrics).
  size_t buffered_bytes() const;

 private:
  ConsoleOutput(ScopedFd out, bool is_socket, EventFd wake, const ConsoleOutputOptions& options,
                const Clock* clock);

  // Writes what the fd accepts; -1 with errno on failure.
  ssize_t WriteSome(const uint8_t* data, size_t len);
  // Copies up to n bytes from the ring's head into pending_.
  void MoveFromRing(size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailOutput(int err);

  const ScopedFd out_;
  const bool is_socket_;
  const EventFd wake_;
  const ConsoleOutputOptions options_;

  // vCPU side.
  mutable absl::Mutex mu_;
  std::vector<uint8_t> ring_ ABSL_GUARDED_BY(mu_);
  size_t head_ ABSL_GUARDED_BY(mu_) = 0;
  size_t len_ ABSL_GUARDED_BY(mu_) = 0;
  bool throttled_ ABSL_GUARDED_BY(mu_) = false;
  bool capped_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;

  // Event-loop side.
  TokenBucket bucket_;
  std::vector<uint8_t> pending_;  // admitted bytes (then the marker) not yet written
  size_t pending_off_ = 0;        // written prefix of pending_
  size_t pending_data_end_ = 0;   // guest bytes end here; the marker follows
  uint64_t admitted_ = 0;         // guest bytes admitted towards the cap

  std::atomic<uint64_t> bytes_in_{0};
  std::atomic<uint64_t> bytes_written_{0};
  std::atomic<uint64_t> dropped_rate_limited_{0};
  std::atomic<uint64_t> dropped_cap_{0};
  std::atomic<uint64_t> dropped_overflow_{0};
  std::atomic<uint64_t> dropped_write_error_{0};
};

}  // namespace dsec::devices
