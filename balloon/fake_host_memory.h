// SPDX-License-Identifier: Apache-2.0
// A simulated page table for estimator and controller tests: each 4 KiB
// page is resident (in the page cache) or not, mapped (PTE present) or not,
// swapped or not. Advice behaves as on a MAP_SHARED memfd mapping:
// MADV_DONTNEED unmaps and keeps the page, MADV_PAGEOUT moves resident pages
// to swap (only when swap is enabled), Touch() is a guest access.
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "balloon/host_memory.h"

namespace dsec::balloon {

class FakeHostMemory : public HostMemoryOps {
 public:
  struct Page {
    bool resident = false;
    bool mapped = false;
    bool swapped = false;
  };

  // A guest access to every page of [addr, addr + len): faults it in.
  void Touch(uint64_t addr, uint64_t len) {
    for (uint64_t p = addr / kHostPageSize; p < (addr + len + kHostPageSize - 1) / kHostPageSize;
         ++p) {
      Page& page = pages_[p];
      if (page.swapped) ++refaults_;
      page = {true, true, false};
    }
  }
  void set_swap(bool on) { swap_ = on; }
  uint64_t refaults() const { return refaults_; }
  uint64_t advise_calls(int advice) const {
    auto it = advise_calls_.find(advice);
    return it == advise_calls_.end() ? 0 : it->second;
  }
  uint64_t ResidentPages(uint64_t addr, uint64_t len) const {
    uint64_t n = 0;
    for (uint64_t p = addr / kHostPageSize; p < (addr + len) / kHostPageSize; ++p) {
      auto it = pages_.find(p);
      n += (it != pages_.end() && it->second.resident) ? 1 : 0;
    }
    return n;
  }

  absl::Status ReadPagemap(uint64_t addr, std::span<uint64_t> out) override {
    for (size_t i = 0; i < out.size(); ++i) {
      const Page page = Get(addr / kHostPageSize + i);
      out[i] = (page.mapped ? kPagemapPresent : 0) | (page.swapped ? kPagemapSwapped : 0);
    }
    return absl::OkStatus();
  }
  absl::Status Residency(uint64_t addr, std::span<uint8_t> out) override {
    for (size_t i = 0; i < out.size(); ++i) out[i] = Get(addr / kHostPageSize + i).resident;
    return absl::OkStatus();
  }
  absl::Status Advise(uint64_t addr, uint64_t len, int advice) override {
    ++advise_calls_[advice];
    for (uint64_t p = addr / kHostPageSize; p < (addr + len) / kHostPageSize; ++p) {
      auto it = pages_.find(p);
      if (it == pages_.end()) continue;
      if (advice == MADV_DONTNEED) it->second.mapped = false;
      if (advice == MADV_PAGEOUT && swap_ && it->second.resident) it->second = {false, false, true};
    }
    return absl::OkStatus();
  }

 private:
  Page Get(uint64_t page) const {
    auto it = pages_.find(page);
    return it == pages_.end() ? Page{} : it->second;
  }

  std::map<uint64_t, Page> pages_;
  std::map<int, uint64_t> advise_calls_;
  bool swap_ = false;
  uint64_t refaults_ = 0;
};

}  // namespace dsec::balloon
