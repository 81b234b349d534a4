// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/e820.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "base/status.h"

namespace dsec::arch {

namespace {

absl::Status CheckNoWrap(std::span<const AddressRange> ranges, const char* what) {
  for (const auto& r : ranges) {
    if (r.start + r.size < r.start) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s range [0x%x, +0x%x) wraps the address space", what, r.start, r.size));
    }
  }
  return absl::OkStatus();
}

bool Covered(std::span<const AddressRange> ranges, uint64_t a, uint64_t b) {
  for (const auto& r : ranges) {
    if (r.size != 0 && r.start <= a && b <= r.end()) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::vector<E820Entry>> BuildE820(std::span<const AddressRange> ram,
                                                 std::span<const AddressRange> reserved) {
  DSEC_RETURN_IF_ERROR(CheckNoWrap(ram, "RAM"));
  DSEC_RETURN_IF_ERROR(CheckNoWrap(reserved, "reserved"));
  // Split the address space at every range boundary; each elementary piece is
  // then wholly inside or outside every range, so its type is well defined.
  std::vector<uint64_t> cuts;
  for (const auto* set : {&ram, &reserved}) {
    for (const auto& r : *set) {
      if (r.size == 0) continue;
      cuts.push_back(r.start);
      cuts.push_back(r.end());
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());

  std::vector<E820Entry> out;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    uint64_t a = cuts[i], b = cuts[i + 1];
    uint32_t type = 0;
    if (Covered(reserved, a, b)) {
      type = kE820Reserved;
    } else if (Covered(ram, a, b)) {
      type = kE820Ram;
    } else {
      continue;
    }
    if (!out.empty() && out.back().type == type && out.back().addr + out.back().size == a) {
      out.back().size += b - a;
    } else {
      out.push_back({a, b - a, type});
    }
  }
  if (out.size() > kMaxE820Entries) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "e820 map needs %d entries, the zero page holds at most %d", out.size(),
        kMaxE820Entries));
  }
  return out;
}

absl::StatusOr<std::vector<E820Entry>> GuestE820(const memory::GuestMemory& mem) {
  std::vector<AddressRange> ram;
  for (const auto& r : mem.regions()) ram.push_back({r.gpa, r.size});
  const AddressRange reserved[] = {kLowReservedArea};
  return BuildE820(ram, reserved);
}

}  // namespace dsec::arch
