// SPDX-License-Identifier: Apache-2.0
// Per-exec output policy: a byte cap shared by stdout and stderr and a
// token-bucket rate limit. Bytes over either are dropped and counted; the
// reader always drains the pipe, so the writer is never blocked forever.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/clock.h"
#include "base/token_bucket.h"

namespace dsec {

// Threads: one owner thread (the exec's I/O loop).
class OutputLimiter {
 public:
  // cap_bytes 0 = no cap; rate_bytes_per_s 0 = no rate limit (burst: one
  // second's worth, at least 64 KiB so a short burst of output passes).
  OutputLimiter(uint64_t cap_bytes, uint64_t rate_bytes_per_s, const Clock* clock);

  // Keeps what the cap and the bucket admit of `data` in `out`.
  void Admit(std::string_view data, std::string* out);

  uint64_t kept_bytes() const { return kept_; }
  uint64_t dropped_bytes() const { return dropped_; }
  uint64_t dropped_by_cap() const { return dropped_cap_; }
  uint64_t dropped_by_rate() const { return dropped_rate_; }

 private:
  const uint64_t cap_;
  TokenBucket bucket_;
  uint64_t kept_ = 0;
  uint64_t dropped_ = 0;
  uint64_t dropped_cap_ = 0;
  uint64_t dropped_rate_ = 0;
};

}  // namespace dsec
