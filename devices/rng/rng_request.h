// SPDX-License-Identifier: Apache-2.0
// Pure parsing of virtio-rng requests (virtio 1.2 section 5.4.6): no I/O, no
// ring access, fuzzable.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "devices/virtio/descriptor_chain.h"

namespace dsec::devices {

struct RngRequest {
  // Bytes the driver offered to receive (sum of the writable buffers).
  uint64_t capacity = 0;
};

// Section 5.4.6.1: a request is a chain of device-writable buffers only.
// InvalidArgument for a chain with driver-readable buffers or without
// writable space; the device completes such a chain with length 0.
absl::StatusOr<RngRequest> ParseRngRequest(const virtio::DescriptorChain& chain);

// How many bytes to supply: the device may use less than the whole buffer
// (section 5.4.6.1), so this is min(capacity, max_per_request, allowance).
uint64_t RngFillLength(const RngRequest& request, uint64_t max_per_request, uint64_t allowance);

}  // namespace dsec::devices
