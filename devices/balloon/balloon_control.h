// SPDX-License-Identifier: Apache-2.0
// What a reclaim controller (balloon/) sees of one virtio-balloon device:
// set the target, read the guest's statistics, the balloon size and the
// device's counters. BalloonDevice implements it; controller tests use a fake.
#pragma once

#include <cstdint>
#include <optional>

#include "devices/balloon/balloon_request.h"

namespace dsec::devices {

// The device's counters (a snapshot). Pages are 4 KiB.
struct BalloonMetrics {
  uint64_t inflated_pages = 0;        // pages put into the balloon (accepted)
  uint64_t deflated_pages = 0;        // pages taken out of it
  uint64_t deflated_unrequested_pages = 0;  // deflated while not above target (e.g. OOM)
  uint64_t released_bytes = 0;        // host memory released for inflated pages
  uint64_t reported_pages = 0;        // free pages reported (accepted)
  uint64_t reported_released_bytes = 0;     // host memory released for reported pages
  uint64_t refused_not_ram = 0;       // pages outside guest RAM (holes, MMIO)
  uint64_t refused_not_releasable = 0;  // pages in guest memory that is not RAM (pmem)
  uint64_t refused_duplicate = 0;     // inflated twice / reported while inflated / repeated
  uint64_t refused_not_inflated = 0;  // deflate of a page not in the balloon
  uint64_t refused_unaligned = 0;     // reported ranges not page-aligned
  uint64_t refused_rate = 0;          // reported pages over the per-second budget
  uint64_t throttled = 0;             // inflate requests deferred by the budget
  uint64_t bad_requests = 0;          // malformed buffers (completed, nothing done)
  uint64_t release_errors = 0;        // backend Release() failures
  uint64_t stats_updates = 0;         // statistics buffers received
  uint64_t stats_requests = 0;        // statistics buffers returned to ask for more

  uint64_t refused_total() const {
    return refused_not_ram + refused_not_releasable + refused_duplicate + refused_not_inflated +
           refused_unaligned + refused_rate;
  }
};

// The last statistics the guest sent.
struct BalloonStatsSample {
  BalloonStats stats;
  int64_t received_ns = 0;  // device clock when the buffer arrived
  uint64_t sequence = 0;    // 1 for the first update, +1 per update
};

// Threads: every method may be called from any thread (the controller's).
class BalloonControl {
 public:
  virtual ~BalloonControl() = default;

  // Asks the guest to hold `pages` 4 KiB pages in its balloon: writes
  // num_pages in the config space and, if the driver is running, sends a
  // configuration change notification (section 5.5.6.1).
  virtual void SetTargetPages(uint32_t pages) = 0;
  virtual uint32_t target_pages() const = 0;
  // The driver's `actual` config field (what the guest says it holds).
  virtual uint32_t actual_pages() const = 0;
  // Pages the host tracks as inflated (and has released).
  virtual uint64_t balloon_pages() const = 0;
  // Whether a driver is running the device (DRIVER_OK and not reset).
  virtual bool driver_active() const = 0;
  // Whether the driver negotiated VIRTIO_BALLOON_F_STATS_VQ.
  virtual bool stats_enabled() const = 0;
  // Returns the held statistics buffer to the guest so that it sends fresh
  // statistics (section 5.5.6.3). No-op without a held buffer.
  virtual void RequestStats() = 0;
  // The last statistics received, if any since activation.
  virtual std::optional<BalloonStatsSample> GetStats() const = 0;
  virtual BalloonMetrics metrics() const = 0;
};

}  // namespace dsec::devices
