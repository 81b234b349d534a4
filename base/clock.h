// SPDX-License-Identifier: Apache-2.0
// A source of monotonic time in nanoseconds, behind an interface so that rate
// limiters and timestamping devices can be tested with a settable clock.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace dsec {

// The one "now" of the code base: CLOCK_MONOTONIC, for durations, deadlines
// and timestamps that never go back. Code that a test must drive takes a
// Clock (below) instead.
inline int64_t MonotonicNowNs() {
  timespec ts;
  // CLOCK_MONOTONIC cannot fail with a valid timespec pointer.
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
inline int64_t MonotonicNowMs() { return MonotonicNowNs() / 1'000'000; }
inline double MonotonicNowS() { return static_cast<double>(MonotonicNowNs()) / 1e9; }

// Thread-safe: any thread may call NowNs().
class Clock {
 public:
  virtual ~Clock() = default;
  // Nanoseconds on a monotonic timeline (CLOCK_MONOTONIC for the real clock).
  virtual int64_t NowNs() const = 0;
};

// CLOCK_MONOTONIC. Stateless; Get() returns a process-wide instance.
class MonotonicClock : public Clock {
 public:
  static const MonotonicClock& Get() {
    static const MonotonicClock clock;
    return clock;
  }
  int64_t NowNs() const override { return MonotonicNowNs(); }
};

// CLOCK_REALTIME: wall time (nanoseconds since the epoch), for deadlines a
// client sees as dates (a sandbox's TTL). Stateless; Get() returns a
// process-wide instance.
class WallClock : public Clock {
 public:
  static const WallClock& Get() {
    static const WallClock clock;
    return clock;
  }
  int64_t NowNs() const override {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  }
};

// CLOCK_MONOTONIC that stands still while paused: a sandbox's command
// timeouts count only the time its processes could run (the container
// tier pauses it with the sandbox's freeze). Thread-safe.
class PausableClock : public Clock {
 public:
  int64_t NowNs() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return (paused_at_ns_ >= 0 ? paused_at_ns_ : MonotonicNowNs()) - stood_ns_;
  }
  // Idempotent; Resume goes on from where Pause stopped.
  void Pause() {
    std::lock_guard<std::mutex> lock(mu_);
    if (paused_at_ns_ < 0) paused_at_ns_ = MonotonicNowNs();
  }
  void Resume() {
    std::lock_guard<std::mutex> lock(mu_);
    if (paused_at_ns_ < 0) return;
    stood_ns_ += MonotonicNowNs() - paused_at_ns_;
    paused_at_ns_ = -1;
  }

 private:
  mutable std::mutex mu_;
  int64_t paused_at_ns_ = -1;
  int64_t stood_ns_ = 0;  // paused in all, behind CLOCK_MONOTONIC by this
};

// A clock that only moves when told to, for tests. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(int64_t start_ns = 0) : now_ns_(start_ns) {}
  int64_t NowNs() const override { return now_ns_.load(std::memory_order_acquire); }
  void SetNs(int64_t now_ns) { now_ns_.store(now_ns, std::memory_order_release); }
  void AdvanceNs(int64_t delta_ns) { now_ns_.fetch_add(delta_ns, std::memory_order_acq_rel); }

 private:
  std::atomic<int64_t> now_ns_;
};

}  // namespace dsec
