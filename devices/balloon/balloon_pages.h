// SPDX-License-Identifier: Apache-2.0
// Which guest pages are in the balloon: one bit per 4 KiB page of releasable
// guest RAM (32 KiB of bitmap per GiB of RAM). It lets the device refuse a
// PFN inflated twice or deflated without being inflated, and tells the
// controller how many pages the host really holds back, whatever the guest
// writes into the `actual` config field.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "devices/balloon/balloon_backend.h"

namespace dsec::devices {

// Threads: the device's event-loop thread only (count() is mirrored into an
// atomic by the device for other threads).
class BalloonPageSet {
 public:
  explicit BalloonPageSet(std::span<const BalloonRange> ram);

  enum class Lookup { kNotRam, kIn, kOut };
  // Where the page `pfn` (4 KiB units) stands. kNotRam for anything outside
  // the releasable ranges.
  Lookup Find(uint64_t pfn) const;
  // Marks/clears a page; returns false if it was already in that state or
  // is not RAM.
  bool Insert(uint64_t pfn);
  bool Erase(uint64_t pfn);
  // Empties the set (device reset: the guest owns every page again).
  void Clear();
  uint64_t count() const { return count_; }
  // The pages in the set as maximal runs {first pfn, pages}, ascending.
  std::vector<std::pair<uint64_t, uint64_t>> Runs() const;

 private:
  struct Region {
    uint64_t first_pfn;
    uint64_t pages;
    std::vector<uint64_t> bits;
  };
  // The region holding pfn, or nullptr.
  Region* FindRegion(uint64_t pfn);
  const Region* FindRegion(uint64_t pfn) const;

  std::vector<Region> regions_;
  uint64_t count_ = 0;
};

}  // namespace dsec::devices
