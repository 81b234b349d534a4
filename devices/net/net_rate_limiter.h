// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>

#include "base/clock.h"
#include "base/token_bucket.h"

namespace dsec::devices {

// Limits for one direction of a NIC. A rate of 0 switches that limit off; a
// burst of 0 means one second's worth (see TokenBucket).
struct NetRateLimit {
  uint64_t bytes_per_second = 0;
  uint64_t bytes_burst = 0;
  uint64_t packets_per_second = 0;
  uint64_t packets_burst = 0;
};

// A pair of token buckets (bytes, packets) for one direction. The device asks
// before moving a frame and charges after, because on receive the frame's
// size is only known once it has been read into the guest's buffer. A frame
// larger than the bytes available still goes, and the shortfall becomes a
// debt that holds back the next frames until it is paid, so the long-run
// byte rate is exact even for frames larger than the burst.
//
// Threads: the device's event-loop thread only.
class NetRateLimiter {
 public:
  NetRateLimiter(const NetRateLimit& limit, const Clock* clock);

  bool unlimited() const { return bytes_.unlimited() && packets_.unlimited(); }
  // 0 if one more frame may go now, else nanoseconds (>= 1) to wait before
  // asking again.
  int64_t NsUntilAdmitted();
  // Accounts one frame of `bytes` that went.
  void Charge(uint64_t bytes);

 private:
  TokenBucket bytes_;
  TokenBucket packets_;
  uint64_t byte_debt_ = 0;
};

}  // namespace dsec::devices
