// SPDX-License-Identifier: Apache-2.0
// A BalloonBackend for tests: fixed releasable ranges, records every
// Release() call, can be told to fail.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "devices/balloon/balloon_backend.h"

namespace dsec::devices {

class FakeBalloonBackend : public BalloonBackend {
 public:
  explicit FakeBalloonBackend(std::vector<BalloonRange> ram) : ram_(std::move(ram)) {}

  std::span<const BalloonRange> releasable() const override { return ram_; }
  absl::StatusOr<uint64_t> Release(uint64_t gpa, uint64_t len) override {
    releases_.push_back({gpa, len});
    if (!result_.ok()) return result_;
    return len;
  }

  // Non-OK: every Release fails with it (and is still recorded).
  void set_result(absl::Status s) { result_ = std::move(s); }
  const std::vector<BalloonRange>& releases() const { return releases_; }
  uint64_t released_bytes() const {
    uint64_t n = 0;
    for (const BalloonRange& r : releases_) n += r.size;
    return n;
  }

 private:
  std::vector<BalloonRange> ram_;
  std::vector<BalloonRange> releases_;
  absl::Status result_;
};

}  // namespace dsec::devices
