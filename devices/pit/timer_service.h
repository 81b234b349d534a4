// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/event_loop.h"

namespace dsec::devices {

// The event-loop services a timer device needs: run work on the loop thread
// and own timers there. It is an interface so that device tests can fire
// timers by hand (FakeTimerService) instead of waiting for real time.
//
// Threads: Post() from any thread; AddTimer/CancelTimer and every task and
// timer callback on the loop thread only.
class TimerService {
 public:
  using Task = std::function<void()>;
  virtual ~TimerService() = default;
  virtual void Post(Task task) = 0;
  // Fires after `first_ns` and then every `interval_ns` (0: once; a one-shot
  // timer is gone once it has fired and must not be cancelled afterwards).
  virtual absl::StatusOr<int> AddTimer(int64_t first_ns, int64_t interval_ns, Task task) = 0;
  virtual absl::Status CancelTimer(int id) = 0;
};

// TimerService on an EventLoop (timerfds; expirations that pile up while the
// loop is busy run the callback once). The loop must outlive this object.
class EventLoopTimerService : public TimerService {
 public:
  explicit EventLoopTimerService(EventLoop* loop) : loop_(loop) {}
  void Post(Task task) override { loop_->Post(std::move(task)); }
  absl::StatusOr<int> AddTimer(int64_t first_ns, int64_t interval_ns, Task task) override {
    return loop_->AddTimer(first_ns, interval_ns, std::move(task));
  }
  absl::Status CancelTimer(int id) override { return loop_->CancelTimer(id); }

 private:
  EventLoop* const loop_;
};

}  // namespace dsec::devices
