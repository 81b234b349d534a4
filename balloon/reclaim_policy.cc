// SPDX-License-Identifier: Apache-2.0
#include "balloon/reclaim_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dsec::balloon {

namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kMiB = 1ull << 20;
using devices::BalloonStatTag;

void DecideBalloon(const ReclaimKnobs& knobs, const VmObservation& obs, VmPolicyState& state,
                   PolicyDecision& d) {
  if (!knobs.balloon || !obs.has_balloon || !obs.driver_active) return;
  const double aggr = std::clamp(knobs.aggressiveness, 0.0, 1.0);
  const uint64_t min_free_pages = knobs.min_free_mib * kMiB / kPage;
  // The guest deflated on its own (DEFLATE_ON_OOM): accept its size and do
  // not inflate again for a while.
  if (obs.deflated_unrequested_pages > state.prev_unrequested) {
    state.prev_unrequested = obs.deflated_unrequested_pages;
    state.balloon_hold_until_ns = obs.now_ns + knobs.pause_ns;
    d.pressure = true;
    d.reason = "guest deflated on its own";
    if (obs.target_pages > obs.balloon_pages) {
      d.target_pages = static_cast<uint32_t>(obs.balloon_pages);
    }
    return;
  }
  if (!obs.stats || obs.stats->sequence == state.stats_sequence) return;  // nothing new
  const devices::BalloonStatsSample& s = *obs.stats;
  state.stats_sequence = s.sequence;
  if (obs.now_ns - s.received_ns > knobs.stats_max_age_ns) return;
  if (!s.stats.Has(BalloonStatTag::kFreeMemory)) return;
  // What the guest could hand over without swapping. Linux reports it as
  // MemAvailable: free memory plus the page cache and slab it can drop
  // (tmpfs and anonymous memory are not in it). Inflating the balloon makes
  // the guest drop that cache, so it counts; a guest without a cache (the
  // test guest reports available = free) or without the figure is judged by
  // its free memory. Judging a Linux guest by free
  // memory alone would never take its page cache and, once the cache has
  // filled its RAM, would read the low free figure as pressure.
  uint64_t free_pages = s.stats.Get(BalloonStatTag::kFreeMemory) / kPage;
  if (s.stats.Has(BalloonStatTag::kAvailableMemory)) {
    free_pages = std::max(free_pages, s.stats.Get(BalloonStatTag::kAvailableMemory) / kPage);
  }
  double fault_rate = 0;
  const uint64_t majflt = s.stats.Get(BalloonStatTag::kMajorFaults);
  if (s.stats.Has(BalloonStatTag::kMajorFaults)) {
    if (state.have_prev_stats && s.received_ns > state.prev_stats_ns &&
        majflt >= state.prev_major_faults) {
      fault_rate = static_cast<double>(majflt - state.prev_major_faults) * 1e9 /
                   static_cast<double>(s.received_ns - state.prev_stats_ns);
    }
    state.have_prev_stats = true;
    state.prev_major_faults = majflt;
    state.prev_stats_ns = s.received_ns;
  }
  const bool faulting = fault_rate > static_cast<double>(knobs.pressure_major_faults_per_sec);
  if (free_pages < min_free_pages || faulting) {
    // Pressure: give back what is missing to min_free, and half of the
    // balloon while the guest is faulting heavily.
    uint64_t shrink = free_pages < min_free_pages ? min_free_pages - free_pages : 0;
    if (faulting) shrink = std::max(shrink, obs.balloon_pages / 2);
    d.pressure = true;
    d.reason = faulting ? absl::StrCat("guest major faults ", static_cast<uint64_t>(fault_rate), "/s")
                        : absl::StrCat("guest free ", free_pages * kPage / kMiB, " MiB < min");
    const uint64_t target = obs.balloon_pages > shrink ? obs.balloon_pages - shrink : 0;
    if (target < obs.target_pages) d.target_pages = static_cast<uint32_t>(target);
    return;
  }
  if (obs.now_ns < state.balloon_hold_until_ns || aggr == 0) return;
  uint64_t excess = free_pages - min_free_pages;
  if (obs.resident_known) {
    // Only guest-free memory the host backs is worth taking: the guest uses
    // ram - balloon - free (available) pages, the rest of what is resident
    // is free or droppable cache.
    const uint64_t held = obs.balloon_pages + free_pages;
    const uint64_t used = obs.ram_pages > held ? obs.ram_pages - held : 0;
    const uint64_t resident_free = obs.resident_pages > used ? obs.resident_pages - used : 0;
    excess = std::min(excess, resident_free);
  }
  const uint64_t grow = static_cast<uint64_t>(aggr * static_cast<double>(excess));
  if (grow < knobs.min_balloon_step_pages) return;
  const uint64_t cap = obs.ram_pages > min_free_pages ? obs.ram_pages - min_free_pages : 0;
  const uint64_t target = std::min({obs.balloon_pages + grow, cap, uint64_t{UINT32_MAX}});
  if (target > obs.target_pages) {
    d.target_pages = static_cast<uint32_t>(target);
    d.reason = absl::StrCat("guest free/available ", free_pages * kPage / kMiB, " MiB: inflate");
  }
}

void DecidePageout(const ReclaimKnobs& knobs, const VmObservation& obs, VmPolicyState& state,
                   PolicyDecision& d) {
  if (obs.interval_ns > 0) {
    const double refaults_per_sec = static_cast<double>(obs.refault_bytes / kPage) * 1e9 /
                                    static_cast<double>(obs.interval_ns);
    d.slowdown = refaults_per_sec * static_cast<double>(knobs.refault_cost_ns) / 1e9;
  }
  if (d.slowdown > knobs.max_slowdown) {
    state.pause_level = std::min<uint32_t>(state.pause_level + 1, 4);
    state.pageout_paused_until_ns = obs.now_ns + (knobs.pause_ns << (state.pause_level - 1));
  }
  if (obs.now_ns < state.pageout_paused_until_ns) {
    d.pageout_paused = true;
    return;
  }
  if (d.slowdown < knobs.max_slowdown / 2) state.pause_level = 0;
  const double aggr = std::clamp(knobs.aggressiveness, 0.0, 1.0);
  if (!knobs.pageout || !obs.swap_available || !obs.ws_ok || d.pressure || aggr == 0) return;
  uint64_t budget = std::min<uint64_t>(
      static_cast<uint64_t>(aggr * static_cast<double>(obs.ws.cold_bytes())),
      knobs.max_pageout_bytes_per_tick);
  budget = budget / kPage * kPage;
  for (const ColdRange& c : obs.ws.cold) {  // coldest first
    if (budget == 0) break;
    const uint64_t n = std::min(budget, c.range.size);
    d.pageout.push_back({c.range.addr, n});
    budget -= n;
  }
}

}  // namespace

PolicyDecision DecideReclaim(const ReclaimKnobs& knobs, const VmObservation& obs,
                             VmPolicyState& state) {
  PolicyDecision d;
  DecideBalloon(knobs, obs, state, d);
  DecidePageout(knobs, obs, state, d);
  return d;
}

}  // namespace dsec::balloon
