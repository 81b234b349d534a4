// SPDX-License-Identifier: Apache-2.0
// The two sides of `bench net`'s traffic. A listener is made inside a
// network namespace by a short-lived thread (the socket stays in that
// namespace; no long-lived thread of the bench changes namespace, as in
// sandbox/network/netlink.cc's OpenIn). The client is a forked child
// that joins a cgroup v2 directory and a network namespace before it
// opens a socket: cgroup programs judge a socket by the cgroup of the
// process that made it, and a v2 cgroup holds processes, not threads.
// The child only makes system calls (no allocation, no locks: the bench
// has other threads when it forks) and reports through a pipe; the
// bench's thread serves the listener meanwhile.
//
// Threads: the bench's one thread; each call waits for its child.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/scoped_fd.h"

namespace dsec::bench::net {

// A listening TCP socket on `address`:0 in the namespace `netns_fd`
// (non-blocking); `*port` receives the port the kernel chose.
absl::StatusOr<ScopedFd> ListenIn(int netns_fd, const std::string& address, int* port);

// Where a client child runs: the namespace and the cgroup v2 directory it
// joins (the cgroup decides which programs see its sockets).
struct ClientPlace {
  int netns_fd = -1;
  std::string cgroup_dir;
};

// One connect()+close(): its time and the connect's errno (0 = connected).
struct ConnectSample {
  int64_t ns = 0;
  int err = 0;
};

// `iterations` blocking connect()s to address:port, each closed at once,
// from a child in `place`; each connect gives up after 2 s (SO_SNDTIMEO).
// `listener` (or -1 when nothing should connect) is accepted from and
// closed meanwhile, so that its backlog never fills.
absl::StatusOr<std::vector<ConnectSample>> ConnectLoop(const ClientPlace& place, int listener,
                                                       const std::string& address, int port,
                                                       int iterations);

// One TCP connection from a child in `place` to address:port that sends
// `bytes` (write()s of 256 KiB), received here from `listener`: the bytes
// received and the time from accept to the sender's end of stream.
struct BulkResult {
  uint64_t bytes = 0;
  int64_t ns = 0;
  double GBytesPerSecond() const { return ns > 0 ? static_cast<double>(bytes) / static_cast<double>(ns) : 0; }
};
absl::StatusOr<BulkResult> BulkTransfer(const ClientPlace& place, int listener, const std::string& address,
                                        int port, uint64_t bytes);

}  // namespace dsec::bench::net
