// SPDX-License-Identifier: Apache-2.0
#include "base/fd_passing.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "base/scoped_fd.h"

namespace dsec {
namespace {

struct Pair {
  ScopedFd a, b;
};

Pair MakePair() {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  return Pair{ScopedFd(sv[0]), ScopedFd(sv[1])};
}

// A pipe whose read end is returned; the write end tells which pipe it is.
ScopedFd MarkedPipe(char mark) {
  int p[2];
  EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
  EXPECT_EQ(::write(p[1], &mark, 1), 1);
  ::close(p[1]);
  return ScopedFd(p[0]);
}

char MarkOf(int fd) {
  char c = 0;
  EXPECT_EQ(::read(fd, &c, 1), 1);
  return c;
}

int OpenFdCount() {
  int n = 0;
  for (int fd = 0; fd < 1024; ++fd) n += ::fcntl(fd, F_GETFD) != -1;
  return n;
}

TEST(FdPassing, DescriptorsArriveInOrderCloseOnExecWithTheBytes) {
  Pair s = MakePair();
  ScopedFd x = MarkedPipe('x'), y = MarkedPipe('y');
  const int out[2] = {x.get(), y.get()};
  ASSERT_EQ(SendWithFds(s.a.get(), "hi", 2, out, 2), 2);
  char buf[8] = {};
  int in[4] = {-1, -1, -1, -1};
  size_t nfds = 9;
  bool dropped = true;
  ASSERT_EQ(ReceiveWithFds(s.b.get(), buf, sizeof(buf), in, 4, &nfds, 0, &dropped), 2);
  EXPECT_EQ(std::memcmp(buf, "hi", 2), 0);
  ASSERT_EQ(nfds, 2u);
  EXPECT_FALSE(dropped);
  ScopedFd r0(in[0]), r1(in[1]);
  EXPECT_EQ(MarkOf(r0.get()), 'x');
  EXPECT_EQ(MarkOf(r1.get()), 'y');
  EXPECT_EQ(::fcntl(r0.get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
}

TEST(FdPassing, NoDescriptorsIsAPlainMessage) {
  Pair s = MakePair();
  ASSERT_EQ(SendWithFds(s.a.get(), "abc", 3, nullptr, 0), 3);
  char buf[8];
  int in[1];
  size_t nfds = 1;
  ASSERT_EQ(ReceiveWithFds(s.b.get(), buf, sizeof(buf), in, 1, &nfds), 3);
  EXPECT_EQ(nfds, 0u);
}

TEST(FdPassing, DescriptorsPastTheLimitAreClosedAndReported) {
  Pair s = MakePair();
  std::vector<ScopedFd> pipes;
  int out[kMaxPassedFds];
  for (size_t i = 0; i < kMaxPassedFds; ++i) {
    pipes.push_back(MarkedPipe(static_cast<char>('a' + i)));
    out[i] = pipes.back().get();
  }
  const int before = OpenFdCount();
  ASSERT_EQ(SendWithFds(s.a.get(), "z", 1, out, kMaxPassedFds), 1);
  char buf[1];
  int in[2];
  size_t nfds = 0;
  bool dropped = false;
  ASSERT_EQ(ReceiveWithFds(s.b.get(), buf, 1, in, 2, &nfds, 0, &dropped), 1);
  ASSERT_EQ(nfds, 2u);
  EXPECT_TRUE(dropped);
  ScopedFd r0(in[0]), r1(in[1]);
  EXPECT_EQ(MarkOf(r0.get()), 'a');
  EXPECT_EQ(MarkOf(r1.get()), 'b');
  // Only the two kept ones are new in this process.
  EXPECT_EQ(OpenFdCount(), before + 2);
}

TEST(FdPassing, TooManyToSendIsRefused) {
  Pair s = MakePair();
  int out[kMaxPassedFds + 1];
  for (int& fd : out) fd = s.a.get();
  errno = 0;
  EXPECT_EQ(SendWithFds(s.a.get(), "z", 1, out, kMaxPassedFds + 1), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST(FdPassing, PeerGoneIsAnErrorNotASignal) {
  Pair s = MakePair();
  s.b.Reset();
  EXPECT_EQ(SendWithFds(s.a.get(), "z", 1, nullptr, 0), -1);
  EXPECT_EQ(errno, EPIPE);
  char buf[1];
  int in[1];
  size_t nfds = 0;
  Pair t = MakePair();
  t.a.Reset();
  EXPECT_EQ(ReceiveWithFds(t.b.get(), buf, 1, in, 1, &nfds), 0);
}

}  // namespace
}  // namespace dsec
