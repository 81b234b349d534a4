// SPDX-License-Identifier: Apache-2.0
// The address buses of a VM: one for port I/O, one for MMIO. vCPU threads
// route every KVM_EXIT_IO / KVM_EXIT_MMIO through Bus::Read/Write.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dsec::bus {

// A device reachable on a bus. Offsets are relative to the base of the range
// the device was inserted at; data.size() is 1, 2, 4 or 8 (the bus filters
// other sizes). Values are little-endian, as on x86.
//
// Threads: called concurrently from any number of vCPU threads. Implementations
// must be thread-safe and must not block or do file I/O (hand work to the event
// loop instead): a vCPU is stopped for as long as the call takes.
class BusDevice {
 public:
  virtual ~BusDevice() = default;
  // Fills all of `data`.
  virtual void Read(uint64_t offset, std::span<uint8_t> data) = 0;
  virtual void Write(uint64_t offset, std::span<const uint8_t> data) = 0;
};

// Maps non-overlapping address ranges to devices.
//
// Lifecycle: the monitor populates a bus (Insert/Remove) before the vCPUs start
// and does not change it while they run. Insert/Remove are therefore not
// synchronised with Read/Write; lookups take no lock at all, so vCPUs never
// serialise on the bus itself (only, if at all, on a device's own lock).
// Lookup is a binary search over a sorted vector.
//
// Unclaimed addresses: Read/Write return false when no single device covers
// the whole access (the caller logs that, rate-limited). By the PC convention
// for a floating bus, a read of an unclaimed address yields all-ones (0xff
// bytes), which Read stores into `data` before returning false.
class Bus {
 public:
  // `name` ("pio", "mmio") appears in error messages.
  explicit Bus(std::string name) : name_(std::move(name)) {}

  Bus(const Bus&) = delete;
  Bus& operator=(const Bus&) = delete;

  // Claims [base, base+len) for `device`. InvalidArgument for a null device,
  // len 0 or a range that wraps past 2^64; AlreadyExists if it overlaps any
  // range already on the bus. One device may be inserted at several ranges.
  absl::Status Insert(std::shared_ptr<BusDevice> device, uint64_t base, uint64_t len);
  // Removes the range that starts at `base`; NotFound if there is none.
  absl::Status Remove(uint64_t base);

  // Routes an access of data.size() bytes at `addr`. False (and, for Read,
  // data filled with 0xff) if no device covers [addr, addr+size) entirely or
  // the size is not 1, 2, 4 or 8.
  bool Read(uint64_t addr, std::span<uint8_t> data) const;
  bool Write(uint64_t addr, std::span<const uint8_t> data) const;

  const std::string& name() const { return name_; }
  size_t range_count() const { return ranges_.size(); }

 private:
  struct Range {
    uint64_t base;
    uint64_t len;
    std::shared_ptr<BusDevice> device;
  };
  // The range that contains [addr, addr+size) entirely, or nullptr.
  const Range* Find(uint64_t addr, uint64_t size) const;

  std::string name_;
  std::vector<Range> ranges_;  // sorted by base, non-overlapping
};

// A range on a bus for as long as the claim lives: the destructor removes
// it. Move-only. The bus must outlive the claim, and (as for Insert/Remove)
// no vCPU may run while a claim is made or dropped.
class BusClaim {
 public:
  static absl::StatusOr<BusClaim> Insert(Bus* bus, std::shared_ptr<BusDevice> device, uint64_t base,
                                         uint64_t len);
  BusClaim(BusClaim&& o) noexcept : bus_(o.bus_), base_(o.base_) { o.bus_ = nullptr; }
  BusClaim& operator=(BusClaim&& o) noexcept;
  BusClaim(const BusClaim&) = delete;
  BusClaim& operator=(const BusClaim&) = delete;
  ~BusClaim();

 private:
  BusClaim(Bus* bus, uint64_t base) : bus_(bus), base_(base) {}
  Bus* bus_ = nullptr;
  uint64_t base_ = 0;
};

}  // namespace dsec::bus
