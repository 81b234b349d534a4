// SPDX-License-Identifier: Apache-2.0
#include "base/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace dsec {

namespace {
constexpr int64_t kNsPerSecond = 1'000'000'000;
timespec ToTimespec(int64_t ns) {
  return timespec{static_cast<time_t>(ns / kNsPerSecond), static_cast<long>(ns % kNsPerSecond)};
}
}  // namespace

absl::StatusOr<std::unique_ptr<EventLoop>> EventLoop::Create() {
  ScopedFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return ErrnoToStatus("epoll_create1");
  DSEC_ASSIGN_OR_RETURN(EventFd wake, EventFd::Create(EFD_NONBLOCK));
  std::unique_ptr<EventLoop> loop(new EventLoop(std::move(epoll), std::move(wake)));
  int wake_fd = loop->wake_.fd();
  EventLoop* raw = loop.get();
  DSEC_RETURN_IF_ERROR(loop->Add(wake_fd, EPOLLIN, [raw](uint32_t) {
    (void)raw->wake_.Consume();
    raw->RunPosted();
  }));
  return loop;
}

EventLoop::~EventLoop() = default;

absl::Status EventLoop::CheckThread(const char* what) const {
  if (!running_.load(std::memory_order_acquire) || std::this_thread::get_id() == thread_)
    return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("EventLoop::", what, " called off the loop thread while the loop runs"));
}

bool EventLoop::ClaimThread() {
  if (running_.load(std::memory_order_acquire)) return false;  // Run() holds it
  thread_ = std::this_thread::get_id();
  running_.store(true, std::memory_order_release);
  return true;
}

void EventLoop::ReleaseThread(bool claimed) {
  if (claimed) running_.store(false, std::memory_order_release);
}

absl::Status EventLoop::Add(int fd, uint32_t events, Handler handler) {
  DSEC_RETURN_IF_ERROR(CheckThread("Add"));
  if (by_fd_.contains(fd))
    return absl::AlreadyExistsError(absl::StrCat("fd ", fd, " already in the event loop"));
  const uint64_t id = next_id_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = id;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
    return ErrnoToStatus(absl::StrCat("epoll_ctl(ADD, fd ", fd, ")"));
  by_fd_[fd] = id;
  by_id_[id] = Registration{fd, std::make_shared<Handler>(std::move(handler))};
  return absl::OkStatus();
}

absl::Status EventLoop::Remove(int fd) {
  DSEC_RETURN_IF_ERROR(CheckThread("Remove"));
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end())
    return absl::NotFoundError(absl::StrCat("fd ", fd, " not in the event loop"));
  by_id_.erase(it->second);
  by_fd_.erase(it);
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr) != 0)
    return ErrnoToStatus(absl::StrCat("epoll_ctl(DEL, fd ", fd, ")"));
  return absl::OkStatus();
}

absl::StatusOr<int> EventLoop::AddTimer(int64_t first_ns, int64_t interval_ns, Task task) {
  DSEC_RETURN_IF_ERROR(CheckThread("AddTimer"));
  ScopedFd tfd(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!tfd.valid()) return ErrnoToStatus("timerfd_create");
  itimerspec spec{};
  // A zero it_value disarms a timerfd, so "now" is 1 ns.
  spec.it_value = ToTimespec(first_ns > 0 ? first_ns : 1);
  spec.it_interval = ToTimespec(interval_ns);
  if (::timerfd_settime(tfd.get(), 0, &spec, nullptr) != 0) return ErrnoToStatus("timerfd_settime");
  // Ids are never reused (a timerfd's number is), so a stale CancelTimer
  // cannot cancel a newer timer.
  const int id = next_timer_id_++;
  const int fd = tfd.get();
  const bool periodic = interval_ns > 0;
  DSEC_RETURN_IF_ERROR(Add(fd, EPOLLIN, [this, id, fd, periodic, task = std::move(task)](uint32_t) {
    uint64_t expirations = 0;
    if (::read(fd, &expirations, sizeof(expirations)) != sizeof(expirations)) return;
    if (!periodic) {
      // Copy the task out before the handler (which owns it) is destroyed.
      Task once = task;
      (void)CancelTimer(id);
      once();
      return;
    }
    task();
  }));
  timers_.emplace(id, std::move(tfd));
  return id;
}

absl::Status EventLoop::CancelTimer(int id) {
  DSEC_RETURN_IF_ERROR(CheckThread("CancelTimer"));
  auto it = timers_.find(id);
  if (it == timers_.end()) return absl::NotFoundError(absl::StrCat("timer ", id, " not found"));
  absl::Status s = Remove(it->second.get());
  timers_.erase(it);
  return s;
}

void EventLoop::Post(Task task) {
  {
    absl::MutexLock lock(&mu_);
    posted_.push_back(std::move(task));
  }
  (void)wake_.Signal();
}

void EventLoop::RunPosted() {
  std::vector<Task> tasks;
  {
    absl::MutexLock lock(&mu_);
    tasks.swap(posted_);
  }
  for (auto& t : tasks) t();
}

absl::Status EventLoop::RunOnce(int timeout_ms) {
  const bool claimed = ClaimThread();
  absl::Status s = Dispatch(timeout_ms);
  ReleaseThread(claimed);
  return s;
}

absl::Status EventLoop::Dispatch(int timeout_ms) {
  constexpr int kMaxEvents = 32;
  epoll_event events[kMaxEvents];
  int n = ::epoll_wait(epoll_.get(), events, kMaxEvents, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return absl::OkStatus();
    return ErrnoStatus("epoll_wait");
  }
  for (int i = 0; i < n; ++i) {
    auto it = by_id_.find(events[i].data.u64);
    // A handler earlier in this batch may have removed this registration
    // (and its fd number may already belong to a new one).
    if (it == by_id_.end()) continue;
    std::shared_ptr<Handler> handler = it->second.handler;
    (*handler)(events[i].events);
  }
  return absl::OkStatus();
}

absl::Status EventLoop::Run() {
  const bool claimed = ClaimThread();
  absl::Status s;
  while (s.ok() && !stop_.load(std::memory_order_acquire)) s = Dispatch(-1);
  ReleaseThread(claimed);
  return s;
}

void EventLoop::Stop() {
  stop_.store(true, std::memory_order_release);
  (void)wake_.Signal();
}

}  // namespace dsec
