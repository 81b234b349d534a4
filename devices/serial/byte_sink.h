// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <span>

namespace dsec::devices {

// Where a UART's transmitted bytes go. Called on vCPU threads (possibly
// several at once, possibly while the caller holds its device lock), so Put
// must be thread-safe, must never block and cannot fail: an implementation
// that cannot keep up drops and counts.
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void Put(std::span<const uint8_t> bytes) = 0;
  void Put(uint8_t byte) { Put(std::span<const uint8_t>(&byte, 1)); }
};

}  // namespace dsec::devices
