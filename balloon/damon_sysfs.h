// SPDX-License-Identifier: Apache-2.0
// Working-set source on the kernel's DAMON, driven through its sysfs admin
// interface (Documentation/admin-guide/mm/damon/usage.rst):
//   <root>/kdamonds/nr_kdamonds, <root>/kdamonds/<N>/{state,contexts/...}
//
// Ownership rules (the host may run DAMON for its own purposes):
//  - The source only ever uses a kdamond it created itself. It creates one
//    by raising nr_kdamonds by one. The kernel refuses that (EBUSY) while any
//    kdamond runs, and when it accepts, it rebuilds every kdamond directory,
//    wiping the configuration of stopped ones. So Create() first reads every
//    existing kdamond's `state` and `contexts/nr_contexts` and writes nothing
//    unless all are off and unconfigured; otherwise Unavailable (the caller
//    falls back to PagemapSampler). This is the case on the CI host, where
//    the platform's kdamond is running.
//  - It never writes to a kdamond it did not create. Teardown stops its own
//    kdamond, removes its context and gives the slot back (lowers
//    nr_kdamonds) only under the same safety condition, else leaves an empty
//    stopped slot.
//  - The kernel must offer the "vaddr" operations set (avail_operations);
//    some kernels build DAMON with paddr only (this CI host): Unavailable.
//
// Monitoring: one context (vaddr) whose targets are the monitor processes'
// guest-RAM ranges, and one DAMOS scheme with action "stat" matching every
// region, so that writing "update_schemes_tried_regions" to `state` makes
// the kernel list every monitored region with nr_accesses and age under
// schemes/0/tried_regions/. Regions are matched to VMs by address, so all
// tracked VMs must live in one process (the standalone `vm run` case).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "balloon/working_set.h"

namespace dsec::balloon {

struct DamonOptions {
  std::string root = "/sys/kernel/mm/damon/admin";
  uint64_t sample_us = 5'000;
  uint64_t aggr_us = 100'000;
  uint64_t update_us = 1'000'000;
  uint32_t min_regions = 10;
  uint32_t max_regions = 1000;
  // A region whose age (aggregation intervals without a change of its access
  // frequency) covers this long and that saw no access is cold.
  uint64_t cold_after_us = 5'000'000;
};

class DamonSysfsSource : public WorkingSetSource {
 public:
  // Probes the tree and creates this source's own kdamond (see the file
  // comment). Unavailable with the reason when DAMON cannot be used.
  static absl::StatusOr<std::unique_ptr<DamonSysfsSource>> Create(DamonOptions options);
  // Tears down what Create() made.
  ~DamonSysfsSource() override;

  std::string_view name() const override { return "damon"; }
  absl::Status Track(uint64_t vm_id, pid_t pid, std::span<const HostRange> ram) override;
  void Untrack(uint64_t vm_id) override;
  absl::StatusOr<WorkingSetSample> Sample(uint64_t vm_id) override;

  int kdamond_index() const { return index_; }

 private:
  struct Target {
    pid_t pid = 0;
    std::vector<HostRange> ram;
  };

  DamonSysfsSource(DamonOptions options, int index) : options_(std::move(options)), index_(index) {}
  std::string KdamondPath(const std::string& rel) const;
  // Writes the whole configuration of our kdamond and (re)starts it, or stops
  // it when nothing is tracked.
  absl::Status Apply();
  absl::Status Stop();
  void Teardown();

  const DamonOptions options_;
  const int index_;
  bool running_ = false;
  std::map<uint64_t, Target> targets_;
};

// The safety probe behind Create(), exposed for tests: OK if a kdamond may
// be added without disturbing anyone, else Unavailable naming the reason.
absl::Status CheckDamonSlotsFree(const std::string& root, int* nr_kdamonds);

}  // namespace dsec::balloon
