// SPDX-License-Identifier: Apache-2.0
#include "devices/rng/rng_request.h"

#include <algorithm>

#include "absl/status/status.h"

namespace dsec::devices {

absl::StatusOr<RngRequest> ParseRngRequest(const virtio::DescriptorChain& chain) {
  // Guest-controlled: the shape of the chain (the queue validated the
  // addresses and lengths).
  if (!chain.readable.empty()) {
    return absl::InvalidArgumentError("virtio-rng: request has driver-readable buffers");
  }
  RngRequest request{chain.WritableBytes()};
  if (request.capacity == 0) return absl::InvalidArgumentError("virtio-rng: empty request");
  return request;
}

uint64_t RngFillLength(const RngRequest& request, uint64_t max_per_request, uint64_t allowance) {
  return std::min({request.capacity, max_per_request, allowance});
}

}  // namespace dsec::devices
