// SPDX-License-Identifier: Apache-2.0
#include "platform/bus/bus.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace dsec::bus {
namespace {

bool ValidAccessSize(size_t size) { return size == 1 || size == 2 || size == 4 || size == 8; }

}  // namespace

absl::Status Bus::Insert(std::shared_ptr<BusDevice> device, uint64_t base, uint64_t len) {
  if (device == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("bus %s: null device", name_));
  }
  if (len == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bus %s: empty range at 0x%x", name_, base));
  }
  // The last byte is base + len - 1; it must not wrap.
  if (base + (len - 1) < base) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bus %s: range 0x%x+0x%x wraps around", name_, base, len));
  }
  const uint64_t last = base + (len - 1);
  // First range starting after `base`; only it and its predecessor can overlap.
  auto next = std::upper_bound(ranges_.begin(), ranges_.end(), base,
                               [](uint64_t b, const Range& r) { return b < r.base; });
  if (next != ranges_.end() && next->base <= last) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "bus %s: range 0x%x+0x%x overlaps 0x%x+0x%x", name_, base, len, next->base, next->len));
  }
  if (next != ranges_.begin()) {
    const Range& prev = *std::prev(next);
    if (prev.base + (prev.len - 1) >= base) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "bus %s: range 0x%x+0x%x overlaps 0x%x+0x%x", name_, base, len, prev.base, prev.len));
    }
  }
  ranges_.insert(next, Range{base, len, std::move(device)});
  return absl::OkStatus();
}

absl::Status Bus::Remove(uint64_t base) {
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), base,
                             [](const Range& r, uint64_t b) { return r.base < b; });
  if (it == ranges_.end() || it->base != base) {
    return absl::NotFoundError(absl::StrFormat("bus %s: no range at 0x%x", name_, base));
  }
  ranges_.erase(it);
  return absl::OkStatus();
}

const Bus::Range* Bus::Find(uint64_t addr, uint64_t size) const {
  auto next = std::upper_bound(ranges_.begin(), ranges_.end(), addr,
                               [](uint64_t a, const Range& r) { return a < r.base; });
  if (next == ranges_.begin()) return nullptr;
  const Range& r = *std::prev(next);
  // Guest-controlled: addr and size. Compare offsets, not end addresses, so
  // that an access near 2^64 cannot wrap into the range.
  const uint64_t offset = addr - r.base;
  if (offset >= r.len || size > r.len - offset) return nullptr;
  return &r;
}

bool Bus::Read(uint64_t addr, std::span<uint8_t> data) const {
  const Range* r = ValidAccessSize(data.size()) ? Find(addr, data.size()) : nullptr;
  if (r == nullptr) {
    std::fill(data.begin(), data.end(), 0xff);
    return false;
  }
  r->device->Read(addr - r->base, data);
  return true;
}

bool Bus::Write(uint64_t addr, std::span<const uint8_t> data) const {
  const Range* r = ValidAccessSize(data.size()) ? Find(addr, data.size()) : nullptr;
  if (r == nullptr) return false;
  r->device->Write(addr - r->base, data);
  return true;
}

absl::StatusOr<BusClaim> BusClaim::Insert(Bus* bus, std::shared_ptr<BusDevice> device,
                                         uint64_t base, uint64_t len) {
  if (bus == nullptr) return absl::InvalidArgumentError("bus claim: no bus");
  absl::Status s = bus->Insert(std::move(device), base, len);
  if (!s.ok()) return s;
  return BusClaim(bus, base);
}

BusClaim& BusClaim::operator=(BusClaim&& o) noexcept {
  if (this != &o) {
    if (bus_ != nullptr) (void)bus_->Remove(base_);
    bus_ = o.bus_;
    base_ = o.base_;
    o.bus_ = nullptr;
  }
  return *this;
}

BusClaim::~BusClaim() {
  if (bus_ != nullptr) (void)bus_->Remove(base_);
}

}  // namespace dsec::bus
