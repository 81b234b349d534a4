// SPDX-License-Identifier: Apache-2.0
#include "base/fd_passing.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace dsec {

ssize_t SendWithFds(int sock, const void* data, size_t len, const int* fds, size_t nfds,
                    int flags) {
  if (nfds > kMaxPassedFds) {
    errno = EINVAL;
    return -1;
  }
  iovec iov{const_cast<void*>(data), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
  if (nfds > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  ssize_t n;
  do {
    n = ::sendmsg(sock, &msg, flags | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

ssize_t ReceiveWithFds(int sock, void* data, size_t len, int* fds, size_t max_fds, size_t* nfds,
                       int flags, bool* dropped) {
  *nfds = 0;
  if (dropped != nullptr) *dropped = false;
  if (max_fds > kMaxPassedFds) max_fds = kMaxPassedFds;
  iovec iov{data, len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return n;
  bool lost = (msg.msg_flags & MSG_CTRUNC) != 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (*nfds < max_fds) {
        fds[(*nfds)++] = fd;
      } else {
        ::close(fd);
        lost = true;
      }
    }
  }
  if (dropped != nullptr) *dropped = lost;
  return n;
}

}  // namespace dsec
