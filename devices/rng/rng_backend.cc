// SPDX-License-Identifier: Apache-2.0
#include "devices/rng/rng_backend.h"

#include <sys/random.h>

#include <cerrno>

#include "absl/status/status.h"
#include "base/status.h"

namespace dsec::devices {

absl::StatusOr<size_t> GetrandomEntropySource::Fill(std::span<uint8_t> out) {
  if (out.empty()) return 0;
  while (true) {
    ssize_t n = ::getrandom(out.data(), out.size(), GRND_NONBLOCK);
    if (n > 0) return static_cast<size_t>(n);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN)
      return absl::UnavailableError("getrandom: entropy pool not ready");
    return ErrnoStatus("getrandom");
  }
}

}  // namespace dsec::devices
