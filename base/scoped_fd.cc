// SPDX-License-Identifier: Apache-2.0
#include "base/scoped_fd.h"

#include <unistd.h>

namespace dsec {

void ScopedFd::Reset(int fd) {
  if (fd_ >= 0) {
    // close(2) must not be retried on EINTR on Linux: the fd is gone either way.
    ::close(fd_);
  }
  fd_ = fd;
}

}  // namespace dsec
