// SPDX-License-Identifier: Apache-2.0
// Fuzzes the virtio-balloon request parsers: the input selects a parser,
// describes a descriptor chain (non-empty buffers, mostly inside guest
// memory as the queue guarantees, some anywhere) and fills guest memory.
// Checks the invariants the device relies on.
#include <cstddef>
#include <cstdint>

#include "devices/balloon/balloon_request.h"
#include "devices/virtio/fuzz/fuzz_chain.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace dd = dsec::devices;
  static auto* memory =
      dsec::memory::FakeGuestMemory::Create({{0, dsec::virtio::fuzz::kFuzzMemSize}})
          .value()
          .release();
  dsec::virtio::fuzz::FuzzBytes in(data, size);
  const uint8_t which = in.Take<uint8_t>() % 3;
  const uint32_t cap = in.Take<uint8_t>() + 1u;
  dsec::virtio::DescriptorChain chain = dsec::virtio::fuzz::TakeChain(in, *memory);

  if (which == 0) {
    auto pfns = dd::ParsePfnRequest(chain, *memory, cap);
    if (pfns.ok()) {
      if (pfns->empty() || pfns->size() > cap) __builtin_trap();
      dd::CoalescedPfns co = dd::CoalescePfns(*pfns);
      uint64_t total = co.duplicates;
      for (size_t i = 0; i < co.runs.size(); ++i) {
        total += co.runs[i].count;
        if (i > 0 && co.runs[i].first_pfn <= co.runs[i - 1].first_pfn + co.runs[i - 1].count - 1)
          __builtin_trap();
      }
      if (total != pfns->size()) __builtin_trap();
    }
  } else if (which == 1) {
    auto stats = dd::ParseStatsRequest(chain, *memory, cap);
    if (stats.ok() && (stats->present >> dd::kBalloonStatTagCount) != 0) __builtin_trap();
  } else {
    auto ranges = dd::ParseReportRequest(chain, cap);
    if (ranges.ok()) {
      if (ranges->empty() || ranges->size() > cap) __builtin_trap();
      dd::CoalescedRanges co = dd::CoalesceRanges(*ranges);
      for (size_t i = 1; i < co.runs.size(); ++i) {
        if (co.runs[i].first_pfn <= co.runs[i - 1].first_pfn + co.runs[i - 1].count - 1)
          __builtin_trap();
      }
    }
  }
  return 0;
}
