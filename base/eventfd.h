// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "base/scoped_fd.h"

namespace dsec {

// An eventfd(2) counter: the project's cross-thread wake-up primitive and the
// object behind irqfd and ioeventfd. Any thread may Signal(); the owner reads.
class EventFd {
 public:
  // flags: EFD_NONBLOCK / EFD_SEMAPHORE; EFD_CLOEXEC is always added.
  static absl::StatusOr<EventFd> Create(int flags = 0);

  EventFd(EventFd&&) = default;
  EventFd& operator=(EventFd&&) = default;

  // Adds `value` to the counter (wakes readers).
  absl::Status Signal(uint64_t value = 1) const;
  // Reads and resets the counter. On a non-blocking eventfd with a zero
  // counter returns 0.
  absl::StatusOr<uint64_t> Consume() const;

  int fd() const { return fd_.get(); }

 private:
  explicit EventFd(ScopedFd fd) : fd_(std::move(fd)) {}
  ScopedFd fd_;
};

}  // namespace dsec
