// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace dsec {

// Descriptors passed over a unix socket (SCM_RIGHTS). Both calls allocate
// nothing and touch no global state but errno, so a child between clone and
// exec and a sandbox's PID 1 use them as freely as the runtime does.

// The most descriptors one message carries.
inline constexpr size_t kMaxPassedFds = 8;

// sendmsg(2) of `len` bytes with fds[0..nfds) attached (nothing attached when
// nfds is 0; nfds above kMaxPassedFds fails with EINVAL). Retries EINTR;
// MSG_NOSIGNAL is always added to `flags`. Returns what sendmsg returns.
ssize_t SendWithFds(int sock, const void* data, size_t len, const int* fds, size_t nfds,
                    int flags = 0);

// recvmsg(2) of up to `len` bytes; the descriptors that came with them land,
// close-on-exec, in fds[0..*nfds). Descriptors past `max_fds` (at most
// kMaxPassedFds are accepted) are closed at once and, like a truncated
// control message, set *dropped (if given), so nothing sent can leak into
// the receiver. Retries EINTR. Returns what recvmsg returns; on an error no
// descriptor is kept.
ssize_t ReceiveWithFds(int sock, void* data, size_t len, int* fds, size_t max_fds, size_t* nfds,
                       int flags = 0, bool* dropped = nullptr);

}  // namespace dsec
