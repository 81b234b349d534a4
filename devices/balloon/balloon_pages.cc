// SPDX-License-Identifier: Apache-2.0
#include "devices/balloon/balloon_pages.h"

#include <algorithm>

#include "devices/balloon/balloon_request.h"

namespace dsec::devices {

BalloonPageSet::BalloonPageSet(std::span<const BalloonRange> ram) {
  for (const BalloonRange& r : ram) {
    Region region;
    region.first_pfn = r.gpa >> kBalloonPageShift;
    region.pages = r.size >> kBalloonPageShift;
    region.bits.assign((region.pages + 63) / 64, 0);
    regions_.push_back(std::move(region));
  }
}

const BalloonPageSet::Region* BalloonPageSet::FindRegion(uint64_t pfn) const {
  // Regions are sorted (BalloonBackend::releasable()).
  auto it = std::upper_bound(regions_.begin(), regions_.end(), pfn,
                             [](uint64_t p, const Region& r) { return p < r.first_pfn; });
  if (it == regions_.begin()) return nullptr;
  --it;
  return pfn - it->first_pfn < it->pages ? &*it : nullptr;
}

BalloonPageSet::Region* BalloonPageSet::FindRegion(uint64_t pfn) {
  return const_cast<Region*>(static_cast<const BalloonPageSet*>(this)->FindRegion(pfn));
}

BalloonPageSet::Lookup BalloonPageSet::Find(uint64_t pfn) const {
  const Region* r = FindRegion(pfn);
  if (r == nullptr) return Lookup::kNotRam;
  const uint64_t i = pfn - r->first_pfn;
  return (r->bits[i / 64] >> (i % 64)) & 1 ? Lookup::kIn : Lookup::kOut;
}

std::vector<std::pair<uint64_t, uint64_t>> BalloonPageSet::Runs() const {
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  for (const Region& r : regions_) {
    for (uint64_t i = 0; i < r.pages; ++i) {
      if (r.bits[i / 64] == 0 && i % 64 == 0) {
        i += 63;  // a word with no page set
        continue;
      }
      if ((r.bits[i / 64] & (1ull << (i % 64))) == 0) continue;
      const uint64_t pfn = r.first_pfn + i;
      if (!runs.empty() && runs.back().first + runs.back().second == pfn) {
        ++runs.back().second;
      } else {
        runs.emplace_back(pfn, 1);
      }
    }
  }
  return runs;
}

bool BalloonPageSet::Insert(uint64_t pfn) {
  Region* r = FindRegion(pfn);
  if (r == nullptr) return false;
  const uint64_t i = pfn - r->first_pfn;
  const uint64_t mask = 1ull << (i % 64);
  if (r->bits[i / 64] & mask) return false;
  r->bits[i / 64] |= mask;
  ++count_;
  return true;
}

bool BalloonPageSet::Erase(uint64_t pfn) {
  Region* r = FindRegion(pfn);
  if (r == nullptr) return false;
  const uint64_t i = pfn - r->first_pfn;
  const uint64_t mask = 1ull << (i % 64);
  if (!(r->bits[i / 64] & mask)) return false;
  r->bits[i / 64] &= ~mask;
  --count_;
  return true;
}

void BalloonPageSet::Clear() {
  for (Region& r : regions_) std::fill(r.bits.begin(), r.bits.end(), 0);
  count_ = 0;
}

}  // namespace dsec::devices
