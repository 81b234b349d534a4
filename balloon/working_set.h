// SPDX-License-Identifier: Apache-2.0
// Working-set estimation behind one interface, with two sources:
// DamonSysfsSource (the kernel's DAMON, through its sysfs admin interface,
// where a kdamond can be had) and PagemapSampler (user space, everywhere).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "balloon/reclaim_vm.h"

namespace dsec::balloon {

// A range estimated idle for `idle_intervals` sampling intervals.
struct ColdRange {
  HostRange range;
  uint32_t idle_intervals = 0;
};

// What a source saw of one VM over the last interval.
struct WorkingSetSample {
  uint64_t tracked_bytes = 0;  // guest RAM covered
  uint64_t hot_bytes = 0;      // estimated bytes accessed during the interval
  // Ranges idle for at least the source's cold threshold, coldest first.
  std::vector<ColdRange> cold;
  uint64_t cold_bytes() const {
    uint64_t n = 0;
    for (const ColdRange& c : cold) n += c.range.size;
    return n;
  }
};

// Threads: one thread (the controller's) uses a source.
class WorkingSetSource {
 public:
  virtual ~WorkingSetSource() = default;
  virtual std::string_view name() const = 0;
  // Starts watching `ram` of VM `vm_id` in process `pid`.
  virtual absl::Status Track(uint64_t vm_id, pid_t pid, std::span<const HostRange> ram) = 0;
  virtual void Untrack(uint64_t vm_id) = 0;
  // Closes one interval for the VM and returns what it saw.
  virtual absl::StatusOr<WorkingSetSample> Sample(uint64_t vm_id) = 0;
};

}  // namespace dsec::balloon
