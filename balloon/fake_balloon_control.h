// SPDX-License-Identifier: Apache-2.0
// A BalloonControl for controller tests: the test plays the guest (sets
// stats, balloon size, unrequested deflation) and reads what the
// controller asked for.
#pragma once

#include <optional>

#include "devices/balloon/balloon_control.h"

namespace dsec::balloon {

class FakeBalloonControl : public devices::BalloonControl {
 public:
  void SetTargetPages(uint32_t pages) override {
    target = pages;
    ++target_changes;
  }
  uint32_t target_pages() const override { return target; }
  uint32_t actual_pages() const override { return static_cast<uint32_t>(pages); }
  uint64_t balloon_pages() const override { return pages; }
  bool driver_active() const override { return active; }
  bool stats_enabled() const override { return true; }
  void RequestStats() override { ++stats_requests; }
  std::optional<devices::BalloonStatsSample> GetStats() const override { return stats; }
  devices::BalloonMetrics metrics() const override { return m; }

  // The guest sends statistics with `free_bytes` free at time `now_ns`.
  void GuestStats(uint64_t free_bytes, uint64_t major_faults, int64_t now_ns) {
    devices::BalloonStatsSample s;
    s.stats.Set(devices::BalloonStatTag::kFreeMemory, free_bytes);
    s.stats.Set(devices::BalloonStatTag::kMajorFaults, major_faults);
    s.received_ns = now_ns;
    s.sequence = stats ? stats->sequence + 1 : 1;
    stats = s;
  }

  uint32_t target = 0;
  uint64_t pages = 0;
  bool active = true;
  int target_changes = 0;
  int stats_requests = 0;
  std::optional<devices::BalloonStatsSample> stats;
  devices::BalloonMetrics m;
};

}  // namespace dsec::balloon
