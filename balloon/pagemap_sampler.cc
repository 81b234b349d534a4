// SPDX-License-Identifier: Apache-2.0
#include "balloon/pagemap_sampler.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "base/status.h"

namespace dsec::balloon {

absl::StatusOr<std::unique_ptr<PagemapSampler>> PagemapSampler::Create(
    HostMemoryOps* ops, PagemapSamplerOptions options) {
  if (ops == nullptr) return absl::InvalidArgumentError("pagemap sampler: no memory ops");
  if (options.chunk_bytes == 0 || options.chunk_bytes % kHostPageSize != 0 ||
      options.samples_per_chunk == 0 || options.samples_per_chunk > 32 ||
      options.samples_per_chunk > options.chunk_bytes / kHostPageSize ||
      options.cold_intervals == 0) {
    return absl::InvalidArgumentError("pagemap sampler: bad chunk/sample/cold settings");
  }
  return std::unique_ptr<PagemapSampler>(new PagemapSampler(ops, std::move(options)));
}

uint64_t PagemapSampler::NextRandom() {
  // xorshift64*: cheap, deterministic for tests.
  rng_ ^= rng_ >> 12;
  rng_ ^= rng_ << 25;
  rng_ ^= rng_ >> 27;
  return rng_ * 0x2545f4914f6cdd1dull;
}

absl::Status PagemapSampler::Track(uint64_t vm_id, pid_t pid, std::span<const HostRange> ram) {
  if (pid != ::getpid()) {
    return absl::UnavailableError("pagemap sampler: guest RAM must be mapped in this process");
  }
  for (const HostRange& r : ram) {
    if (r.addr % kHostPageSize != 0 || r.size % kHostPageSize != 0 || r.size == 0) {
      return absl::InvalidArgumentError("pagemap sampler: guest RAM range is not page-aligned");
    }
  }
  if (options_.verify_shared) {
    std::ifstream in(options_.maps_path);
    std::stringstream text;
    text << in.rdbuf();
    DSEC_RETURN_IF_ERROR(CheckSharedMappings(text.str(), ram));
  }
  Vm vm;
  vm.ram.assign(ram.begin(), ram.end());
  for (const HostRange& r : vm.ram) {
    for (uint64_t off = 0; off < r.size; off += options_.chunk_bytes) {
      Chunk c;
      c.addr = r.addr + off;
      c.pages = std::min(options_.chunk_bytes, r.size - off) / kHostPageSize;
      vm.chunks.push_back(std::move(c));
    }
  }
  vms_[vm_id] = std::move(vm);
  return absl::OkStatus();
}

void PagemapSampler::Untrack(uint64_t vm_id) { vms_.erase(vm_id); }

absl::StatusOr<WorkingSetSample> PagemapSampler::Sample(uint64_t vm_id) {
  auto it = vms_.find(vm_id);
  if (it == vms_.end()) return absl::NotFoundError("pagemap sampler: VM not tracked");
  Vm& vm = it->second;
  WorkingSetSample out;
  size_t first = 0;
  for (const HostRange& r : vm.ram) {
    const size_t n = (r.size + options_.chunk_bytes - 1) / options_.chunk_bytes;
    DSEC_RETURN_IF_ERROR(SampleRange(r, std::span<Chunk>(vm.chunks).subspan(first, n), out));
    first += n;
  }
  ++cost_.intervals;
  std::stable_sort(out.cold.begin(), out.cold.end(), [](const ColdRange& a, const ColdRange& b) {
    return a.idle_intervals > b.idle_intervals;
  });
  return out;
}

absl::Status PagemapSampler::SampleRange(const HostRange& range, std::span<Chunk> chunks,
                                         WorkingSetSample& out) {
  const uint64_t pages = range.size / kHostPageSize;
  pagemap_.resize(pages);
  resident_.resize(pages);
  DSEC_RETURN_IF_ERROR(ops_->ReadPagemap(range.addr, pagemap_));
  DSEC_RETURN_IF_ERROR(ops_->Residency(range.addr, resident_));
  cost_.pagemap_entries += pages;
  out.tracked_bytes += range.size;
  for (Chunk& c : chunks) {
    const uint64_t base = (c.addr - range.addr) / kHostPageSize;
    // 1. Close the interval: which armed samples were touched again?
    uint32_t accessed = 0;
    for (uint32_t off : c.armed) accessed += (pagemap_[base + off] & kPagemapPresent) ? 1 : 0;
    uint64_t resident = 0;
    for (uint64_t i = 0; i < c.pages; ++i) resident += resident_[base + i] & 1;
    cost_.accessed_samples += accessed;
    if (!c.armed.empty()) {
      c.observed = true;
      c.idle = accessed > 0 ? 0 : c.idle + 1;
      out.hot_bytes += c.pages * kHostPageSize * accessed / c.armed.size();
    }
    if (c.observed && c.idle >= options_.cold_intervals && resident > 0) {
      out.cold.push_back({{c.addr, c.pages * kHostPageSize}, c.idle});
    }
    // 2. Arm new samples: one random page per stratum. A page not mapped
    // needs no advice (any access maps it, and pagemap will show it).
    const uint32_t n = options_.samples_per_chunk < c.pages ? options_.samples_per_chunk
                                                           : static_cast<uint32_t>(c.pages);
    const uint64_t stratum = c.pages / n;
    c.armed.clear();
    for (uint32_t s = 0; s < n; ++s) {
      const uint32_t off = static_cast<uint32_t>(s * stratum + NextRandom() % stratum);
      if (pagemap_[base + off] & kPagemapPresent) {
        DSEC_RETURN_IF_ERROR(
            ops_->Advise(c.addr + off * kHostPageSize, kHostPageSize, MADV_DONTNEED));
        ++cost_.unmapped_pages;
      }
      c.armed.push_back(off);
    }
  }
  return absl::OkStatus();
}

}  // namespace dsec::balloon
