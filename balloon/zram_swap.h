// SPDX-License-Identifier: Apache-2.0
// A zram swap device of our own, for pageout where the host has no swap:
// created with /sys/class/zram-control/hot_add (after `modprobe zram` if the
// control directory is missing), given a v1 swap header and swapped on;
// removed (swapoff, reset, hot_remove) by the destructor. Used by the
// integration tests and `bench reclaim`; it never touches a zram device it
// did not create.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace dsec::balloon {

// zram's /sys/block/zramN/mm_stat (Documentation/admin-guide/blockdev/zram.rst):
// orig_data_size compr_data_size mem_used_total ...
struct ZramMmStat {
  uint64_t orig_data_size = 0;   // uncompressed bytes stored
  uint64_t compr_data_size = 0;  // compressed bytes
  uint64_t mem_used_total = 0;   // memory the device holds (incl. allocator overhead)
};
absl::StatusOr<ZramMmStat> ParseZramMmStat(std::string_view text);

// Threads: one owner thread. The destructor may run during unwinding after a
// signal was turned into an orderly return (benchmarks block SIGINT/SIGTERM
// and read them from a signalfd).
class ZramSwap {
 public:
  // Unavailable (with the reason) where zram cannot be created or swapped on;
  // PermissionDenied without root. `priority` is the swapon priority (a high
  // one makes the kernel prefer this device over others, -1 = default).
  static absl::StatusOr<std::unique_ptr<ZramSwap>> Create(uint64_t size_bytes,
                                                          int priority = 32767);
  ~ZramSwap();
  ZramSwap(const ZramSwap&) = delete;
  ZramSwap& operator=(const ZramSwap&) = delete;

  int id() const { return id_; }
  const std::string& device() const { return dev_; }
  absl::StatusOr<ZramMmStat> MmStat() const;

 private:
  ZramSwap() = default;
  int id_ = -1;
  std::string dev_;
  bool on_ = false;
};

}  // namespace dsec::balloon
