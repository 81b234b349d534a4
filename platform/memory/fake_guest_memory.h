// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "platform/memory/guest_memory.h"

namespace dsec::memory {

// Guest memory backed by ordinary heap buffers, for unit tests of code that
// reads or writes guest memory (loaders, virtqueues, devices).
class FakeGuestMemory : public GuestMemory {
 public:
  struct Range {
    uint64_t gpa;
    uint64_t size;
  };
  static absl::StatusOr<std::unique_ptr<FakeGuestMemory>> Create(std::vector<Range> ranges);

 private:
  FakeGuestMemory() = default;
  std::vector<std::unique_ptr<uint8_t[]>> buffers_;
};

}  // namespace dsec::memory
