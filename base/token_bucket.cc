// SPDX-License-Identifier: Apache-2.0
#include "base/token_bucket.h"

#include <algorithm>

namespace dsec {

TokenBucket::TokenBucket(uint64_t rate_per_second, uint64_t burst, const Clock* clock)
    : rate_(rate_per_second),
      burst_(rate_per_second != 0 && burst == 0 ? rate_per_second : burst),
      clock_(clock),
      units_(static_cast<u128>(burst_) * kScale),
      last_ns_(clock->NowNs()) {}

void TokenBucket::Refill() {
  const int64_t now = clock_->NowNs();
  if (now <= last_ns_) {
    // A clock that goes back adds nothing; time counts again from its new value.
    last_ns_ = now;
    return;
  }
  const u128 elapsed = static_cast<u128>(now - last_ns_);
  last_ns_ = now;
  const u128 cap = static_cast<u128>(burst_) * kScale;
  // rate_ < 2^64 and elapsed < 2^63, so the product fits in 128 bits; units_
  // is at most 2^64 * 1e9 < 2^94, so the sum cannot overflow either.
  units_ = std::min(cap, units_ + static_cast<u128>(rate_) * elapsed);
}

bool TokenBucket::TryTake(uint64_t n) {
  if (unlimited()) return true;
  Refill();
  const u128 need = static_cast<u128>(n) * kScale;
  if (need > units_) return false;
  units_ -= need;
  return true;
}

uint64_t TokenBucket::Take(uint64_t n) {
  if (unlimited()) return n;
  Refill();
  const uint64_t granted = std::min<uint64_t>(n, static_cast<uint64_t>(units_ / kScale));
  units_ -= static_cast<u128>(granted) * kScale;
  return granted;
}

uint64_t TokenBucket::Available() {
  if (unlimited()) return std::numeric_limits<uint64_t>::max();
  Refill();
  return static_cast<uint64_t>(units_ / kScale);
}

int64_t TokenBucket::NsUntilAvailable(uint64_t n) {
  if (unlimited()) return 0;
  if (n > burst_) return kNever;
  Refill();
  const u128 need = static_cast<u128>(n) * kScale;
  if (need <= units_) return 0;
  const u128 missing = need - units_;
  const u128 ns = (missing + rate_ - 1) / rate_;  // round up: never wake too early
  return ns > static_cast<u128>(kNever) ? kNever : static_cast<int64_t>(ns);
}

}  // namespace dsec
