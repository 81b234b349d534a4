// SPDX-License-Identifier: Apache-2.0
#include "base/scoped_fd.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "base/eventfd.h"
#include "base/mmap.h"

namespace dsec {
namespace {

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(ScopedFd, ClosesOnDestructionAndMoves) {
  int raw = ::dup(0);
  ASSERT_GE(raw, 0);
  {
    ScopedFd a(raw);
    ScopedFd b(std::move(a));
    EXPECT_FALSE(a.valid());
    EXPECT_EQ(b.get(), raw);
    EXPECT_TRUE(IsOpen(raw));
  }
  EXPECT_FALSE(IsOpen(raw));
}

TEST(ScopedFd, ReleaseGivesUpOwnership) {
  int raw = ::dup(0);
  {
    ScopedFd a(raw);
    EXPECT_EQ(a.Release(), raw);
  }
  EXPECT_TRUE(IsOpen(raw));
  ScopedFd cleanup(raw);
}

TEST(EventFd, SignalAccumulatesAndConsumeResets) {
  auto efd = EventFd::Create(EFD_NONBLOCK);
  ASSERT_TRUE(efd.ok()) << efd.status();
  ASSERT_TRUE(efd->Signal(2).ok());
  ASSERT_TRUE(efd->Signal(3).ok());
  EXPECT_EQ(*efd->Consume(), 5u);
  EXPECT_EQ(*efd->Consume(), 0u);  // non-blocking and empty
}

TEST(Mmap, AnonymousMappingIsWritableAndAdvisable) {
  auto map = Mmap::Anonymous(1 << 20);
  ASSERT_TRUE(map.ok()) << map.status();
  map->data()[4096] = 7;
  EXPECT_TRUE(map->Advise(0, 1 << 20, MADV_DONTNEED).ok());
  EXPECT_EQ(map->data()[4096], 0);  // private anonymous memory reads back zero
  EXPECT_FALSE(map->Advise(1 << 20, 1, MADV_DONTNEED).ok());
}

TEST(Mmap, RejectsZeroSize) { EXPECT_FALSE(Mmap::Anonymous(0).ok()); }

}  // namespace
}  // namespace dsec
