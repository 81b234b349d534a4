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

absl::Status EventLoop::Add(int fd, uint32_t events, Handler handler) {
  if (handlers_.contains(fd))
    return absl::AlreadyExistsError(absl::StrCat("fd ", fd, " already in the event loop"));
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
    return ErrnoToStatus(absl::StrCat("epoll_ctl(ADD, fd ", fd, ")"));
  handlers_[fd] = std::make_shared<Handler>(std::move(handler));
  return absl::OkStatus();
}

absl::Status EventLoop::Remove(int fd) {
  auto it = handlers_.find(fd);
  if (it == handlers_.end())
    return absl::NotFoundError(absl::StrCat("fd ", fd, " not in the event loop"));
  handlers_.erase(it);
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr) != 0)
    return ErrnoToStatus(absl::StrCat("epoll_ctl(DEL, fd ", fd, ")"));
  return absl::OkStatus();
}

absl::StatusOr<int> EventLoop::AddTimer(int64_t first_ns, int64_t interval_ns, Task task) {
  ScopedFd tfd(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!tfd.valid()) return ErrnoToStatus("timerfd_create");
  itimerspec spec{};
  // A zero it_value disarms a timerfd, so "now" is 1 ns.
  spec.it_value = ToTimespec(first_ns > 0 ? first_ns : 1);
  spec.it_interval = ToTimespec(interval_ns);
  if (::timerfd_settime(tfd.get(), 0, &spec, nullptr) != 0) return ErrnoToStatus("timerfd_settime");
  int id = tfd.get();
  const bool periodic = interval_ns > 0;
  DSEC_RETURN_IF_ERROR(Add(id, EPOLLIN, [this, id, periodic, task = std::move(task)](uint32_t) {
    uint64_t expirations = 0;
    if (::read(id, &expirations, sizeof(expirations)) != sizeof(expirations)) return;
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
  auto it = timers_.find(id);
  if (it == timers_.end()) return absl::NotFoundError(absl::StrCat("timer ", id, " not found"));
  absl::Status s = Remove(id);
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
  constexpr int kMaxEvents = 32;
  epoll_event events[kMaxEvents];
  int n = ::epoll_wait(epoll_.get(), events, kMaxEvents, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return absl::OkStatus();
    return ErrnoStatus("epoll_wait");
  }
  for (int i = 0; i < n; ++i) {
    auto it = handlers_.find(events[i].data.fd);
    // A handler earlier in this batch may have removed this fd.
    if (it == handlers_.end()) continue;
    std::shared_ptr<Handler> handler = it->second;  // survives self-removal
    (*handler)(events[i].events);
  }
  return absl::OkStatus();
}

absl::Status EventLoop::Run() {
  while (!stop_.load(std::memory_order_acquire)) {
    DSEC_RETURN_IF_ERROR(RunOnce(-1));
  }
  return absl::OkStatus();
}

void EventLoop::Stop() {
  stop_.store(true, std::memory_order_release);
  (void)wake_.Signal();
}

}  // namespace dsec
