// SPDX-License-Identifier: Apache-2.0
#include "platform/memory/guest_memory.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace dsec::memory {

namespace {
absl::Status OutOfRange(uint64_t gpa, uint64_t len) {
  return absl::InvalidArgumentError(
      absl::StrFormat("guest range [0x%x, +0x%x) is not inside guest memory", gpa, len));
}
}  // namespace

uint64_t GuestMemory::TotalSize() const {
  uint64_t total = 0;
  for (const auto& r : regions_) total += r.size;
  return total;
}

const GuestRegion* GuestMemory::FindRegion(uint64_t gpa) const {
  // Regions are sorted: find the last region starting at or below gpa.
  auto it = std::upper_bound(regions_.begin(), regions_.end(), gpa,
                             [](uint64_t a, const GuestRegion& r) { return a < r.gpa; });
  if (it == regions_.begin()) return nullptr;
  --it;
  if (gpa - it->gpa < it->size) return &*it;
  return nullptr;
}

absl::StatusOr<uint8_t*> GuestMemory::HostAddress(uint64_t gpa, uint64_t len) const {
  for (const auto& r : regions_) {
    if (gpa < r.gpa) continue;
    uint64_t off = gpa - r.gpa;
    if (off > r.size) continue;
    // off <= size, so size - off cannot underflow.
    if (len > r.size - off) continue;
    if (off == r.size && len != 0) continue;
    return r.host + off;
  }
  return OutOfRange(gpa, len);
}

absl::Status GuestMemory::Read(uint64_t gpa, std::span<uint8_t> out) const {
  uint64_t done = 0;
  while (done < out.size()) {
    uint64_t addr = gpa + done;
    if (addr < gpa) return OutOfRange(gpa, out.size());  // wrapped
    const GuestRegion* r = FindRegion(addr);
    if (r == nullptr) return OutOfRange(gpa, out.size());
    uint64_t chunk = std::min<uint64_t>(out.size() - done, r->end() - addr);
    std::memcpy(out.data() + done, r->host + (addr - r->gpa), chunk);
    done += chunk;
  }
  return absl::OkStatus();
}

absl::Status GuestMemory::Write(uint64_t gpa, std::span<const uint8_t> in) const {
  // Validate the whole range before writing anything, so a failing write
  // leaves guest memory unchanged.
  uint64_t checked = 0;
  while (checked < in.size()) {
    uint64_t addr = gpa + checked;
    if (addr < gpa) return OutOfRange(gpa, in.size());
    const GuestRegion* r = FindRegion(addr);
    if (r == nullptr) return OutOfRange(gpa, in.size());
    checked += std::min<uint64_t>(in.size() - checked, r->end() - addr);
  }
  uint64_t done = 0;
  while (done < in.size()) {
    uint64_t addr = gpa + done;
    const GuestRegion* r = FindRegion(addr);
    uint64_t chunk = std::min<uint64_t>(in.size() - done, r->end() - addr);
    std::memcpy(r->host + (addr - r->gpa), in.data() + done, chunk);
    done += chunk;
  }
  return absl::OkStatus();
}

absl::Status GuestMemory::Fill(uint64_t gpa, uint8_t value, uint64_t len) const {
  uint64_t checked = 0;
  while (checked < len) {
    uint64_t addr = gpa + checked;
    if (addr < gpa) return OutOfRange(gpa, len);
    const GuestRegion* r = FindRegion(addr);
    if (r == nullptr) return OutOfRange(gpa, len);
    checked += std::min<uint64_t>(len - checked, r->end() - addr);
  }
  uint64_t done = 0;
  while (done < len) {
    uint64_t addr = gpa + done;
    const GuestRegion* r = FindRegion(addr);
    uint64_t chunk = std::min<uint64_t>(len - done, r->end() - addr);
    std::memset(r->host + (addr - r->gpa), value, chunk);
    done += chunk;
  }
  return absl::OkStatus();
}

absl::Status ValidateRegionLayout(std::span<const GuestRegion> regions) {
  for (size_t i = 0; i < regions.size(); ++i) {
    const auto& r = regions[i];
    if (r.size == 0)
      return absl::InvalidArgumentError(absl::StrFormat("region %d is empty", i));
    if (r.gpa + r.size < r.gpa)
      return absl::InvalidArgumentError(absl::StrFormat("region %d wraps the address space", i));
    if (i > 0 && regions[i - 1].end() > r.gpa)
      return absl::InvalidArgumentError(
          absl::StrFormat("regions %d and %d overlap or are unsorted", i - 1, i));
  }
  return absl::OkStatus();
}

}  // namespace dsec::memory
