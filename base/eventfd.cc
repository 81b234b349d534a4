// SPDX-License-Identifier: Apache-2.0
#include "base/eventfd.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "base/status.h"

namespace dsec {

absl::StatusOr<EventFd> EventFd::Create(int flags) {
  int fd = ::eventfd(0, flags | EFD_CLOEXEC);
  if (fd < 0) return ErrnoToStatus("eventfd");
  return EventFd(ScopedFd(fd));
}

absl::Status EventFd::Signal(uint64_t value) const {
  for (;;) {
    ssize_t n = ::write(fd_.get(), &value, sizeof(value));
    if (n == sizeof(value)) return absl::OkStatus();
    if (n < 0 && errno == EINTR) continue;
    return ErrnoStatus("write(eventfd)");
  }
}

absl::StatusOr<uint64_t> EventFd::Consume() const {
  for (;;) {
    uint64_t value = 0;
    ssize_t n = ::read(fd_.get(), &value, sizeof(value));
    if (n == sizeof(value)) return value;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return uint64_t{0};
    return ErrnoStatus("read(eventfd)");
  }
}

}  // namespace dsec
