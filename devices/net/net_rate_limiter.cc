// SPDX-License-Identifier: Apache-2.0
#include "devices/net/net_rate_limiter.h"

#include <algorithm>

namespace dsec::devices {

NetRateLimiter::NetRateLimiter(const NetRateLimit& limit, const Clock* clock)
    : bytes_(limit.bytes_per_second, limit.bytes_burst, clock),
      packets_(limit.packets_per_second, limit.packets_burst, clock) {}

int64_t NetRateLimiter::NsUntilAdmitted() {
  if (byte_debt_ > 0) {
    byte_debt_ -= bytes_.Take(byte_debt_);
    if (byte_debt_ > 0) {
      return std::max<int64_t>(1, bytes_.NsUntilAvailable(std::min(byte_debt_, bytes_.burst())));
    }
  }
  if (bytes_.Available() == 0) return std::max<int64_t>(1, bytes_.NsUntilAvailable(1));
  if (packets_.Available() == 0) return std::max<int64_t>(1, packets_.NsUntilAvailable(1));
  return 0;
}

void NetRateLimiter::Charge(uint64_t bytes) {
  packets_.Take(1);
  byte_debt_ += bytes - bytes_.Take(bytes);
}

}  // namespace dsec::devices
