// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "platform/interrupt/interrupt_line.h"

namespace dsec::devices {

// Counts pulses, for device tests. Thread-safe. set_result() makes the next
// Trigger() calls fail (they are still counted) to test error paths.
class FakeInterruptLine : public InterruptLine {
 public:
  absl::Status Trigger() override {
    count_.fetch_add(1, std::memory_order_relaxed);
    absl::MutexLock lock(&mu_);
    return result_;
  }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  // Returns the count and resets it to zero.
  uint64_t TakeCount() { return count_.exchange(0, std::memory_order_relaxed); }
  void set_result(absl::Status status) {
    absl::MutexLock lock(&mu_);
    result_ = std::move(status);
  }

 private:
  std::atomic<uint64_t> count_{0};
  absl::Mutex mu_;
  absl::Status result_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dsec::devices
