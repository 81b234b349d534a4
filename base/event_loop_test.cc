// SPDX-License-Identifier: Apache-2.0
#include "base/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace dsec {
namespace {

TEST(EventLoop, RunsHandlerWhenFdBecomesReadable) {
  auto loop = EventLoop::Create();
  ASSERT_TRUE(loop.ok()) << loop.status();
  auto efd = EventFd::Create(EFD_NONBLOCK);
  ASSERT_TRUE(efd.ok());
  int calls = 0;
  ASSERT_TRUE((*loop)->Add(efd->fd(), EPOLLIN, [&](uint32_t) {
    (void)efd->Consume();
    ++calls;
  }).ok());
  ASSERT_TRUE(efd->Signal().ok());
  ASSERT_TRUE((*loop)->RunOnce(1000).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ((*loop)->Add(efd->fd(), EPOLLIN, [](uint32_t) {}).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE((*loop)->Remove(efd->fd()).ok());
  EXPECT_EQ((*loop)->Remove(efd->fd()).code(), absl::StatusCode::kNotFound);
}

TEST(EventLoop, PostAndStopFromAnotherThread) {
  auto loop_or = EventLoop::Create();
  ASSERT_TRUE(loop_or.ok());
  EventLoop* loop = loop_or->get();
  std::atomic<int> ran{0};
  std::thread t([&] { ASSERT_TRUE(loop->Run().ok()); });
  loop->Post([&] { ran.fetch_add(1); });
  loop->Post([&] { loop->Stop(); });
  t.join();
  EXPECT_EQ(ran.load(), 1);
}

TEST(EventLoop, OneShotTimerFiresOnceAndPeriodicRepeats) {
  auto loop = EventLoop::Create();
  ASSERT_TRUE(loop.ok());
  int once = 0, periodic = 0;
  ASSERT_TRUE((*loop)->AddTimer(1'000'000, 0, [&] { ++once; }).ok());
  auto id = (*loop)->AddTimer(1'000'000, 1'000'000, [&] { ++periodic; });
  ASSERT_TRUE(id.ok());
  while (periodic < 3) ASSERT_TRUE((*loop)->RunOnce(1000).ok());
  EXPECT_EQ(once, 1);
  EXPECT_TRUE((*loop)->CancelTimer(*id).ok());
  EXPECT_EQ((*loop)->CancelTimer(*id).code(), absl::StatusCode::kNotFound);
}

// Both fds are readable, so one epoll_wait reports both. Whichever handler
// runs first removes and closes the other fd and registers a fresh,
// never-signalled eventfd under the very same number. The closed fd's event
// still sits in the batch: it must be dropped, not delivered to the
// newcomer (dispatch by registration, not by fd number).
TEST(EventLoop, AnFdNumberReusedWithinOneBatchGetsNoStaleEvent) {
  auto loop = EventLoop::Create();
  ASSERT_TRUE(loop.ok());
  ScopedFd fds[2] = {ScopedFd(::eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC)),
                     ScopedFd(::eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC))};  // both readable
  ASSERT_TRUE(fds[0].valid() && fds[1].valid());
  int replaced = 0, newcomer_calls = 0, reused = -1;
  auto replace_other = [&](int self) {
    if (replaced++ > 0) return;  // only the first handler of the batch acts
    ScopedFd& other = fds[1 - self];
    const int number = other.get();
    ASSERT_TRUE((*loop)->Remove(number).ok());
    other.Reset();
    ScopedFd fresh(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    ASSERT_TRUE(fresh.valid());
    if (fresh.get() != number) {
      ASSERT_EQ(::dup2(fresh.get(), number), number);
      fresh = ScopedFd(number);
    }
    other = std::move(fresh);
    reused = number;
    ASSERT_TRUE((*loop)->Add(number, EPOLLIN, [&](uint32_t) { ++newcomer_calls; }).ok());
  };
  ASSERT_TRUE((*loop)->Add(fds[0].get(), EPOLLIN, [&](uint32_t) { replace_other(0); }).ok());
  ASSERT_TRUE((*loop)->Add(fds[1].get(), EPOLLIN, [&](uint32_t) { replace_other(1); }).ok());
  ASSERT_TRUE((*loop)->RunOnce(1000).ok());
  ASSERT_EQ(replaced, 1) << "the replaced fd's own handler ran";
  EXPECT_EQ(newcomer_calls, 0) << "the closed fd's event reached the handler now on its number";
  // The newcomer is live: signalled, it runs.
  uint64_t one = 1;
  ASSERT_EQ(::write(reused, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  ASSERT_TRUE((*loop)->RunOnce(1000).ok());
  EXPECT_EQ(newcomer_calls, 1);
  EXPECT_TRUE((*loop)->Remove(fds[0].get()).ok());
  EXPECT_TRUE((*loop)->Remove(fds[1].get()).ok());
}

TEST(EventLoop, ChangesFromAnotherThreadWhileItRunsAreRefused) {
  auto loop = EventLoop::Create();
  ASSERT_TRUE(loop.ok());
  auto efd = EventFd::Create(EFD_NONBLOCK);
  ASSERT_TRUE(efd.ok());
  absl::Notification running, added;
  absl::Status from_loop;
  (*loop)->Post([&] { running.Notify(); });  // runs inside Run(), on its thread
  std::thread runner([&] { EXPECT_TRUE((*loop)->Run().ok()); });
  running.WaitForNotification();
  EXPECT_EQ((*loop)->Add(efd->fd(), EPOLLIN, [](uint32_t) {}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*loop)->AddTimer(1'000'000, 0, [] {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The same call posted to the loop thread is accepted.
  (*loop)->Post([&] {
    from_loop = (*loop)->Add(efd->fd(), EPOLLIN, [](uint32_t) {});
    added.Notify();
  });
  added.WaitForNotification();
  EXPECT_TRUE(from_loop.ok()) << from_loop;
  EXPECT_EQ((*loop)->Remove(efd->fd()).code(), absl::StatusCode::kFailedPrecondition);
  (*loop)->Stop();
  runner.join();
  // Stopped, the loop is its owner's again.
  EXPECT_TRUE((*loop)->Remove(efd->fd()).ok());
}

}  // namespace
}  // namespace dsec
