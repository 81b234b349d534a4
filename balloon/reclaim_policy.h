// SPDX-License-Identifier: Apache-2.0
// The reclaim policy: a pure function from what the controller observed of
// one VM in one tick (guest statistics, balloon state, working-set sample,
// refaults, swap) to what to do (a new balloon target, ranges to page out),
// with the little state it carries between ticks. No I/O, no clock of its
// own: tests drive it with numbers and a fake time line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "balloon/working_set.h"
#include "devices/balloon/balloon_control.h"

namespace dsec::balloon {

struct ReclaimKnobs {
  // Free memory (MiB) the balloon always leaves to the guest.
  uint64_t min_free_mib = 64;
  // 0..1: the share of the guest's excess free memory taken per tick by the
  // balloon, and of the cold memory paged out per tick. 0 turns reclaim off.
  double aggressiveness = 0.5;
  // Pageout of a VM stops while its estimated slowdown -- refaults per second
  // times refault_cost_ns -- is above this fraction of its time.
  double max_slowdown = 0.05;
  bool balloon = true;  // use the balloon
  bool pageout = true;  // use MADV_PAGEOUT (only where swap or zram exists)
  // What one refault of a paged-out page costs the guest (zram decompression
  // and the fault itself; measured figures are in the tens of microseconds).
  uint64_t refault_cost_ns = 20'000;
  // Guest major faults per second that count as memory pressure.
  uint64_t pressure_major_faults_per_sec = 200;
  // Pause after a slowdown breach (doubles per repeated breach, up to 8x) and
  // after the guest deflated on its own (OOM): no inflation meanwhile.
  int64_t pause_ns = 30'000'000'000;
  uint64_t max_pageout_bytes_per_tick = 256ull << 20;
  // Balloon steps smaller than this are not worth a config change.
  uint64_t min_balloon_step_pages = 256;
  // Statistics older than this are not acted on.
  int64_t stats_max_age_ns = 10'000'000'000;
};

// Everything the policy looks at for one VM in one tick.
struct VmObservation {
  int64_t now_ns = 0;
  // Balloon (has_balloon false: the VM has no balloon device).
  bool has_balloon = false;
  bool driver_active = false;
  uint64_t ram_pages = 0;  // 4 KiB pages of guest RAM
  // Guest RAM pages resident in the host (0 with resident_known false).
  // Inflating the balloon over guest-free pages the host never backed
  // releases nothing, so growth is capped at the guest-free pages that are
  // resident: resident - (ram - balloon - free).
  bool resident_known = false;
  uint64_t resident_pages = 0;
  uint32_t target_pages = 0;
  uint64_t balloon_pages = 0;
  uint64_t deflated_unrequested_pages = 0;  // cumulative (device metric)
  std::optional<devices::BalloonStatsSample> stats;
  // Working set (ws_ok false: the source failed this tick).
  bool ws_ok = false;
  WorkingSetSample ws;
  // Refaults of pages the controller paged out, during the last interval.
  uint64_t refault_bytes = 0;
  int64_t interval_ns = 0;
  bool swap_available = false;
};

// Carried between ticks, one per VM.
struct VmPolicyState {
  uint64_t stats_sequence = 0;
  bool have_prev_stats = false;
  uint64_t prev_major_faults = 0;
  int64_t prev_stats_ns = 0;
  uint64_t prev_unrequested = 0;
  int64_t balloon_hold_until_ns = 0;
  int64_t pageout_paused_until_ns = 0;
  uint32_t pause_level = 0;
};

struct PolicyDecision {
  std::optional<uint32_t> target_pages;  // set: change the balloon target
  std::vector<HostRange> pageout;        // MADV_PAGEOUT these
  bool pressure = false;                 // the guest showed memory pressure
  bool pageout_paused = false;           // held back by max_slowdown
  double slowdown = 0;                   // estimated from refaults
  std::string reason;                    // for logs
};

// Fills in a decision and updates `state`.
PolicyDecision DecideReclaim(const ReclaimKnobs& knobs, const VmObservation& obs,
                             VmPolicyState& state);

}  // namespace dsec::balloon
