// SPDX-License-Identifier: Apache-2.0
// Private to platform/kvm: the one place that issues ioctl(2) on KVM descriptors.
#pragma once

#include <sys/ioctl.h>

#include <cerrno>

namespace dsec::kvm::internal {

// ioctl(2) retried while it fails with EINTR. Every KVM ioctl except KVM_RUN
// is safe to retry: they either complete or fail before changing state. The
// vCPU kick signal (see kvm_vcpu.h) can land during any of them, so without
// the retry a kick would turn into a spurious error. Returns the ioctl's
// non-negative result, or -errno on failure: callers pass the error on
// explicitly instead of reading errno after building a message, which may
// itself allocate and clobber it.
template <typename Arg>
int IoctlRetry(int fd, unsigned long request, Arg arg) {
  int ret;
  do {
    ret = ::ioctl(fd, request, arg);
  } while (ret == -1 && errno == EINTR);
  return ret < 0 ? -errno : ret;
}

}  // namespace dsec::kvm::internal
