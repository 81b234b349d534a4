// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <limits>

#include "base/clock.h"

namespace dsec {

// A token bucket: tokens accrue at `rate_per_second` up to `burst`; callers
// take tokens for the units (bytes, operations) they are about to spend.
// Used for console output and, later, virtio-blk/net bytes and operations.
//
// Semantics:
//  - The bucket starts full (`burst` tokens).
//  - rate_per_second == 0 means "no limit": every take succeeds in full and
//    NsUntilAvailable() is 0. This is how a limit is switched off in config.
//  - burst == 0 with a non-zero rate means "one second's worth" (burst =
//    rate), because a bucket that can never hold a token would refuse
//    everything forever.
//  - A request larger than `burst` can never be satisfied all at once:
//    TryTake() refuses it and NsUntilAvailable() returns kNever; Take() grants
//    what is available.
//  - Refill uses 128-bit fixed-point arithmetic (token * 1e9 units), so huge
//    rates and long idle gaps neither overflow nor lose fractional tokens. A
//    clock that goes backwards adds nothing (refill resumes from its new value).
//
// Threads: not thread-safe; one owner thread (e.g. the event loop) uses it.
// The clock must outlive the bucket.
class TokenBucket {
 public:
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

  TokenBucket(uint64_t rate_per_second, uint64_t burst, const Clock* clock);

  bool unlimited() const { return rate_ == 0; }
  uint64_t rate_per_second() const { return rate_; }
  uint64_t burst() const { return burst_; }

  // Takes exactly n tokens if they are all available; otherwise takes none.
  bool TryTake(uint64_t n);
  // Takes up to n tokens; returns how many were granted (0..n).
  uint64_t Take(uint64_t n);
  // Whole tokens available now.
  uint64_t Available();
  // Nanoseconds until n tokens will be available (0 if they are now), or
  // kNever if n > burst.
  int64_t NsUntilAvailable(uint64_t n);

 private:
  using u128 = unsigned __int128;
  static constexpr u128 kScale = 1'000'000'000;  // units per token

  void Refill();

  const uint64_t rate_;
  const uint64_t burst_;
  const Clock* const clock_;
  u128 units_;  // tokens * kScale, at most burst_ * kScale
  int64_t last_ns_;
};

}  // namespace dsec
