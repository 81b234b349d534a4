// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/eventfd.h"
#include "base/scoped_fd.h"

namespace dsec {

// An epoll loop: the one thread of a monitor that runs device data planes and
// timers. Handlers run on the loop thread only. Add/Remove/AddTimer must be
// called on the loop thread or before Run() starts; Post() and Stop() may be
// called from any thread.
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
  EventLoop(ScopedFd epoll, EventFd wake) : epoll_(std::move(epoll)), wake_(std::move(wake)) {}
  void RunPosted();

  ScopedFd epoll_;
  EventFd wake_;
  std::unordered_map<int, std::shared_ptr<Handler>> handlers_;
  std::unordered_map<int, ScopedFd> timers_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::vector<Task> posted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dsec
