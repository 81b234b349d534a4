// SPDX-License-Identifier: Apache-2.0
// An EntropySource for tests: deterministic bytes (a running counter), with
// switchable "no entropy right now" and "broken" states.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "devices/rng/rng_backend.h"

namespace dsec::devices {

class FakeEntropySource : public EntropySource {
 public:
  absl::StatusOr<size_t> Fill(std::span<uint8_t> out) override {
    ++calls_;
    if (!result_.ok()) return result_;
    size_t n = out.size() < max_per_call_ ? out.size() : max_per_call_;
    for (size_t i = 0; i < n; ++i) out[i] = next_++;
    total_ += n;
    return n;
  }
  // Non-OK: every Fill fails with it (Unavailable = "retry later").
  void set_result(absl::Status s) { result_ = std::move(s); }
  void set_max_per_call(size_t n) { max_per_call_ = n; }
  uint64_t total() const { return total_; }
  uint64_t calls() const { return calls_; }

 private:
  absl::Status result_;
  size_t max_per_call_ = SIZE_MAX;
  uint8_t next_ = 0;
  uint64_t total_ = 0;
  uint64_t calls_ = 0;
};

}  // namespace dsec::devices
