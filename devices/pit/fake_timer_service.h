// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "devices/pit/timer_service.h"

namespace dsec::devices {

// A TimerService for tests: posted tasks wait until RunPosted(), timers fire
// only when the test calls Fire(). One-shot timers disappear when fired, as
// with EventLoop. Post() is thread-safe; the rest is for the test thread,
// which plays the loop thread.
class FakeTimerService : public TimerService {
 public:
  struct Timer {
    int64_t first_ns = 0;
    int64_t interval_ns = 0;
  };

  void Post(Task task) override {
    absl::MutexLock lock(&mu_);
    posted_.push_back(std::move(task));
  }
  absl::StatusOr<int> AddTimer(int64_t first_ns, int64_t interval_ns, Task task) override {
    const int id = next_id_++;
    timers_.emplace(id, Entry{Timer{first_ns, interval_ns}, std::move(task)});
    ++added_;
    return id;
  }
  absl::Status CancelTimer(int id) override {
    if (timers_.erase(id) == 0) return absl::NotFoundError(absl::StrCat("timer ", id, " not found"));
    ++cancelled_;
    return absl::OkStatus();
  }

  // Runs the tasks posted so far (and any they post); returns how many ran.
  size_t RunPosted() {
    size_t ran = 0;
    for (;;) {
      std::vector<Task> tasks;
      {
        absl::MutexLock lock(&mu_);
        tasks.swap(posted_);
      }
      if (tasks.empty()) return ran;
      for (auto& t : tasks) t();
      ran += tasks.size();
    }
  }
  // Fires timer `id` once; false if there is no such timer.
  bool Fire(int id) {
    auto it = timers_.find(id);
    if (it == timers_.end()) return false;
    Task task = it->second.task;
    if (it->second.timer.interval_ns == 0) timers_.erase(it);
    task();
    return true;
  }
  // The only armed timer's id, if exactly one is armed.
  std::optional<int> OnlyTimer() const {
    if (timers_.size() != 1) return std::nullopt;
    return timers_.begin()->first;
  }
  std::optional<Timer> timer(int id) const {
    auto it = timers_.find(id);
    if (it == timers_.end()) return std::nullopt;
    return it->second.timer;
  }
  size_t armed() const { return timers_.size(); }
  size_t added() const { return added_; }
  size_t cancelled() const { return cancelled_; }

 private:
  struct Entry {
    Timer timer;
    Task task;
  };
  absl::Mutex mu_;
  std::vector<Task> posted_ ABSL_GUARDED_BY(mu_);
  std::map<int, Entry> timers_;
  int next_id_ = 1;
  size_t added_ = 0;
  size_t cancelled_ = 0;
};

}  // namespace dsec::devices
