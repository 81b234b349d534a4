// SPDX-License-Identifier: Apache-2.0
#include "base/netns.h"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstring>

#include "base/status.h"

namespace dsec {
namespace {

absl::Status LoopbackUp() {
  ScopedFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) return ErrnoToStatus("netns: socket");
  ifreq req{};
  std::memcpy(req.ifr_name, "lo", 3);
  if (::ioctl(s.get(), SIOCGIFFLAGS, &req) != 0) return ErrnoToStatus("netns: SIOCGIFFLAGS lo");
  req.ifr_flags = static_cast<short>(req.ifr_flags | IFF_UP);
  if (::ioctl(s.get(), SIOCSIFFLAGS, &req) != 0) return ErrnoToStatus("netns: SIOCSIFFLAGS lo");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ScopedFd> MakeNetns() {
  ScopedFd home(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!home) return ErrnoToStatus("netns: open own netns");
  if (::unshare(CLONE_NEWNET) != 0) return ErrnoToStatus("netns: unshare(CLONE_NEWNET)");
  ScopedFd fresh(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  absl::Status s = fresh ? LoopbackUp() : ErrnoToStatus("netns: open new netns");
  // Back home whatever happened: this thread must not stay in it.
  if (::setns(home.get(), CLONE_NEWNET) != 0) {
    // The thread is stranded in a namespace nobody else uses; callers make
    // namespaces on threads that do nothing else.
    return ErrnoToStatus("netns: setns back");
  }
  if (!s.ok()) return s;
  return fresh;
}

}  // namespace dsec
