// SPDX-License-Identifier: Apache-2.0
// The host side of virtio-rng: where random bytes come from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/statusor.h"

namespace dsec::devices {

// A source of random bytes. Never blocks.
//
// Threads: used by one thread at a time (the device's event-loop thread).
class EntropySource {
 public:
  virtual ~EntropySource() = default;
  // Fills a prefix of `out` (at least one byte when out is not empty) and
  // returns its length. Unavailable when no entropy can be had right now
  // (retry later); any other error means the source is broken for good.
  virtual absl::StatusOr<size_t> Fill(std::span<uint8_t> out) = 0;
};

// getrandom(2) with GRND_NONBLOCK: the kernel's CSPRNG (EAGAIN, i.e.
// Unavailable, only before the host pool is initialised at boot).
class GetrandomEntropySource : public EntropySource {
 public:
  absl::StatusOr<size_t> Fill(std::span<uint8_t> out) override;
};

}  // namespace dsec::devices
