// SPDX-License-Identifier: Apache-2.0
// The user-space working-set estimator: works on every host (no DAMON, no
// swap needed), for guest RAM in MAP_SHARED memfd mappings of this process.
//
// How it sees accesses: guest RAM is cut into chunks (2 MiB by default); in
// every chunk a few pages are sampled per interval (stratified, positions
// rotate). A sampled page that is mapped is unmapped with MADV_DONTNEED --
// on a shared memfd mapping that only zaps the page table entry (and, through
// the MMU notifier, KVM's mapping); the page and its content stay in the
// memfd. At the next interval /proc/self/pagemap tells which sampled pages
// are mapped again ("present", bit 63): the guest (or the host) touched them,
// by read or by write -- any access faults the page back in. A chunk none of
// whose sampled pages came back for `cold_intervals` intervals is cold.
// (soft-dirty, the alternative, sees writes only and clear_refs resets the
// bits of the whole process.)
//
// What it costs per interval and GiB of guest RAM with 4 samples per 2 MiB:
// 2048 madvise calls, one pagemap read of 2 MiB (batched), one mincore, and
// at most 2048 minor faults taken by the guest (about 1 us each on bare
// metal plus a KVM exit where the guest's mapping was zapped: ~12 us here
// under PVM, i.e. at most ~25 ms of guest time per GiB and interval, less
// than 1% of the sampled 0.2%). Samples give a statistical estimate: a chunk
// accessed sparsely may look cold for a while; the controller's refault
// check (max_slowdown) backs off pageout when that happens.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "balloon/host_memory.h"
#include "balloon/working_set.h"

namespace dsec::balloon {

struct PagemapSamplerOptions {
  uint64_t chunk_bytes = 2ull << 20;  // multiple of 4 KiB
  uint32_t samples_per_chunk = 4;     // 1..32, at most chunk pages
  uint32_t cold_intervals = 3;        // idle intervals before a chunk is cold
  // Check /proc/self/maps that tracked ranges are shared mappings (MADV_DONTNEED
  // on a private mapping would drop data). Tests with fake memory turn it off.
  bool verify_shared = true;
  std::string maps_path = "/proc/self/maps";
  uint64_t seed = 0x9e3779b97f4a7c15ull;
};

// Counters of the estimator's own work (its cost).
struct PagemapSamplerCost {
  uint64_t intervals = 0;
  uint64_t unmapped_pages = 0;  // MADV_DONTNEED calls (one page each)
  uint64_t accessed_samples = 0;  // sampled pages found mapped again (guest faults induced)
  uint64_t pagemap_entries = 0;   // entries read
};

class PagemapSampler : public WorkingSetSource {
 public:
  // `ops` must outlive the sampler.
  static absl::StatusOr<std::unique_ptr<PagemapSampler>> Create(HostMemoryOps* ops,
                                                                PagemapSamplerOptions options);

  std::string_view name() const override { return "pagemap-sampler"; }
  // Unavailable for another process (the estimator works on this process's
  // page tables); FailedPrecondition for a private mapping; InvalidArgument
  // for unaligned ranges.
  absl::Status Track(uint64_t vm_id, pid_t pid, std::span<const HostRange> ram) override;
  void Untrack(uint64_t vm_id) override;
  absl::StatusOr<WorkingSetSample> Sample(uint64_t vm_id) override;

  const PagemapSamplerCost& cost() const { return cost_; }

 private:
  struct Chunk {
    uint64_t addr = 0;
    uint64_t pages = 0;
    uint32_t idle = 0;        // intervals without an access to a sampled page
    bool observed = false;    // at least one interval with armed samples
    std::vector<uint32_t> armed;  // page offsets unmapped last interval
  };
  struct Vm {
    std::vector<HostRange> ram;
    std::vector<Chunk> chunks;
  };

  PagemapSampler(HostMemoryOps* ops, PagemapSamplerOptions options)
      : ops_(ops), options_(std::move(options)), rng_(options_.seed) {}
  uint64_t NextRandom();
  // Closes the interval of one range's chunks, then arms new samples.
  absl::Status SampleRange(const HostRange& range, std::span<Chunk> chunks,
                           WorkingSetSample& out);

  HostMemoryOps* const ops_;
  const PagemapSamplerOptions options_;
  uint64_t rng_;
  std::map<uint64_t, Vm> vms_;
  PagemapSamplerCost cost_;
  std::vector<uint64_t> pagemap_;
  std::vector<uint8_t> resident_;
};

}  // namespace dsec::balloon
