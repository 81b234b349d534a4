// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/eventfd.h"
#include "base/scoped_fd.h"

namespace dsec {

// An epoll loop: the one thread of a monitor that runs device data planes and
// timers. Handlers run on the loop thread only. While Run() or RunOnce() is
// in progress, Add/Remove/AddTimer/CancelTimer may be called only from the
// thread running it (from any other they fail with FAILED_PRECONDITION);
// before and after, from the one thread that owns the loop. Post() and
// Stop() may be called from any thread.
//
// Events are dispatched by registration, not by fd number: each Add gets an
// id of its own that epoll carries back, so if a handler removes and closes
// an fd and a new one with the same number is added within one batch of
// events, the old fd's pending events are dropped instead of reaching the
// new handler.
class EventLoop {
 public:
  using Handler = std::function<void(uint32_t epoll_events)>;
  using Task = std::function<void()>;

  static absl::StatusOr<std::unique_ptr<EventLoop>> Create();
  ~EventLoop();

  // Watches `fd` (not owned) for `events` (EPOLLIN, ...). One handler per fd.
  absl::Status Add(int fd, uint32_t events, Handler handler);
  absl::Status Remove(int fd);

  // A timerfd owned by the loop: fires every `interval_ns` (0: once, after
  // `first_ns`). Returns an id for CancelTimer.
  absl::StatusOr<int> AddTimer(int64_t first_ns, int64_t interval_ns, Task task);
  absl::Status CancelTimer(int id);

  // Runs `task` on the loop thread soon. Thread-safe.
  void Post(Task task);

  // Runs until Stop(). Returns an error only if epoll_wait fails.
  absl::Status Run();
  // One epoll_wait with `timeout_ms` (-1 blocks) and its handlers.
  absl::Status RunOnce(int timeout_ms);
  // Makes Run() return after the current iteration. Thread-safe.
  void Stop();

 private:
  struct Registration {
    int fd;
    std::shared_ptr<Handler> handler;  // shared: survives self-removal
  };

  EventLoop(ScopedFd epoll, EventFd wake) : epoll_(std::move(epoll)), wake_(std::move(wake)) {}
  void RunPosted();
  absl::Status Dispatch(int timeout_ms);
  // OK unless the loop is running on another thread.
  absl::Status CheckThread(const char* what) const;
  bool ClaimThread();  // true if this call claimed the loop
  void ReleaseThread(bool claimed);

  ScopedFd epoll_;
  EventFd wake_;
  uint64_t next_id_ = 1;                               // 0 is never used
  std::unordered_map<uint64_t, Registration> by_id_;  // what epoll reports
  std::unordered_map<int, uint64_t> by_fd_;           // one registration per fd
  std::atomic<bool> running_{false};
  std::thread::id thread_;  // written before running_ is set
  int next_timer_id_ = 1;
  std::unordered_map<int, ScopedFd> timers_;  // by timer id
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::vector<Task> posted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dsec
