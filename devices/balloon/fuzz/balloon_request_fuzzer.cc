// SPDX-License-Identifier: Apache-2.0
// Fuzzes the virtio-balloon request parsers: the input selects a parser,
// describes a descriptor chain (non-empty buffers, mostly inside guest
// memory as the queue guarantees, some anywhere) and fills guest memory.
// Checks the invariants the device relies on.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "devices/balloon/balloon_request.h"
#include "vmm/memory/fake_guest_memory.h"

namespace {

constexpr uint64_t kMemSize = 64 * 1024;

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T Take() {
    T value{};
    const size_t n = std::min(sizeof(T), size_);
    std::memcpy(&value, data_, n);
    data_ += n;
    size_ -= n;
    return value;
  }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_;
  size_t size_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace dd = dsec::devices;
  static auto* memory = dsec::memory::FakeGuestMemory::Create({{0, kMemSize}}).value().release();
  Input in(data, size);
  const uint8_t which = in.Take<uint8_t>() % 3;
  const uint32_t cap = in.Take<uint8_t>() + 1u;
  dsec::virtio::DescriptorChain chain;
  const uint8_t readable = in.Take<uint8_t>() % 8;
  const uint8_t writable = in.Take<uint8_t>() % 8;
  for (int i = 0; i < readable + writable; ++i) {
    const uint32_t sel = in.Take<uint32_t>();
    const uint16_t len = std::max<uint16_t>(in.Take<uint16_t>(), 1);
    const uint64_t gpa = (sel & 0x80000000u) ? (static_cast<uint64_t>(sel) << 20) : sel % kMemSize;
    (i < readable ? chain.readable : chain.writable).push_back({gpa, len});
  }
  const size_t n = std::min<size_t>(in.size(), kMemSize);
  (void)memory->Write(0, std::span<const uint8_t>(in.data(), n));

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
