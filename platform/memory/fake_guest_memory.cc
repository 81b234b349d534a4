// SPDX-License-Identifier: Apache-2.0
#include "platform/memory/fake_guest_memory.h"

#include "base/status.h"

namespace dsec::memory {

absl::StatusOr<std::unique_ptr<FakeGuestMemory>> FakeGuestMemory::Create(
    std::vector<Range> ranges) {
  std::unique_ptr<FakeGuestMemory> mem(new FakeGuestMemory());
  for (const auto& range : ranges) {
    auto buf = std::make_unique<uint8_t[]>(range.size);  // zero-initialised
    mem->regions_.push_back(GuestRegion{range.gpa, range.size, buf.get()});
    mem->buffers_.push_back(std::move(buf));
  }
  DSEC_RETURN_IF_ERROR(ValidateRegionLayout(mem->regions_));
  return mem;
}

}  // namespace dsec::memory
