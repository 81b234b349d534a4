// SPDX-License-Identifier: Apache-2.0
#include "vmm/vm/guest_address_space.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "base/status.h"

namespace dsec::vm {

namespace {

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

class MemSlotMapping : public virtio::GuestMapping {
 public:
  explicit MemSlotMapping(kvm::MemSlot slot) : slot_(std::move(slot)) {}

 private:
  kvm::MemSlot slot_;
};

}  // namespace

WindowPlacer::WindowPlacer(std::span<const arch::AddressRange> ram, uint64_t limit) : limit_(limit) {
  uint64_t low_end = 0;
  high_end_ = arch::kHighRamStart;
  for (const arch::AddressRange& r : ram) {
    if (r.end() <= arch::kMmioHoleStart) {
      low_end = std::max(low_end, r.end());
    } else {
      high_end_ = std::max(high_end_, r.end());
    }
  }
  cursor_ = AlignUp(low_end, kWindowAlignment);
}

absl::StatusOr<uint64_t> WindowPlacer::Place(uint64_t size) {
  if (size == 0 || size % kWindowAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "device window %d: size %d is not a non-zero 2 MiB multiple", count_, size));
  }
  ++count_;
  total_ += size;
  if (!high_ && (size > arch::kMmioHoleStart || cursor_ > arch::kMmioHoleStart - size)) {
    high_ = true;
    cursor_ = AlignUp(high_end_, kWindowAlignment);
  }
  if (cursor_ > limit_ || size > limit_ - cursor_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "too many or too large device windows (pmem layers): %d windows of %d MiB in total do "
        "not fit in the guest address space below %d GiB",
        count_, total_ >> 20, limit_ >> 30));
  }
  const uint64_t start = cursor_;
  cursor_ += size;
  return start;
}

absl::StatusOr<std::unique_ptr<virtio::GuestMapping>> KvmGuestAddressSpace::Map(uint64_t gpa,
                                                                                  uint64_t size,
                                                                                  void* host,
                                                                                  bool read_only) {
  DSEC_ASSIGN_OR_RETURN(kvm::MemSlot slot, kvm::MemSlot::Create(vm_, gpa, size, host,
                                                                kvm::MemSlotFlags{.readonly = read_only}));
  return std::unique_ptr<virtio::GuestMapping>(new MemSlotMapping(std::move(slot)));
}

}  // namespace dsec::vm
