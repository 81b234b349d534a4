// SPDX-License-Identifier: Apache-2.0
#include "base/output_limiter.h"

#include <algorithm>

namespace dsec {

namespace {
uint64_t BurstFor(uint64_t rate) { return rate == 0 ? 0 : std::max<uint64_t>(rate, 64 << 10); }
}  // namespace

OutputLimiter::OutputLimiter(uint64_t cap_bytes, uint64_t rate_bytes_per_s, const Clock* clock)
    : cap_(cap_bytes), bucket_(rate_bytes_per_s, BurstFor(rate_bytes_per_s), clock) {}

void OutputLimiter::Admit(std::string_view data, std::string* out) {
  uint64_t n = data.size();
  uint64_t room = cap_ == 0 ? n : (cap_ > kept_ ? cap_ - kept_ : 0);
  uint64_t by_cap = std::min(n, room);
  dropped_cap_ += n - by_cap;
  // Bytes over the cap take no tokens: the bucket governs kept output only.
  uint64_t granted = by_cap == 0 ? 0 : bucket_.Take(by_cap);
  dropped_rate_ += by_cap - granted;
  out->append(data.data(), granted);
  kept_ += granted;
  dropped_ += n - granted;
}

}  // namespace dsec
