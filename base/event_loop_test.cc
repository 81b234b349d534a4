// SPDX-License-Identifier: Apache-2.0
#include "base/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <thread>

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

}  // namespace
}  // namespace dsec
