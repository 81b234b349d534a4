// SPDX-License-Identifier: Apache-2.0
// The MMIO handler behind a read-only pmem window. The window is a KVM
// read-only memslot: guest reads hit the mapped file directly, guest writes
// exit to the monitor as MMIO. Those writes land here: they are counted,
// logged (rate-limited) and dropped, so the layer file never changes.
//
// Threads: vCPU threads, concurrently (bus::BusDevice contract); counters
// are atomics. Lifetime: the bus holds it; it must not be used after the
// mapping it reads from is unmapped (VirtioDevices removes it first).
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>

#include "platform/bus/bus.h"

namespace dsec::pmem {

class ReadOnlyWriteSink : public bus::BusDevice {
 public:
  // `host`/`size`: the mapped window, for the rare read that exits (an
  // instruction KVM had to emulate); `name` appears in log lines.
  ReadOnlyWriteSink(std::string name, const uint8_t* host, uint64_t size)
      : name_(std::move(name)), host_(host), size_(size) {}

  void Read(uint64_t offset, std::span<uint8_t> data) override;
  void Write(uint64_t offset, std::span<const uint8_t> data) override;

  uint64_t refused_writes() const { return writes_.load(std::memory_order_relaxed); }
  uint64_t refused_bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  const std::string name_;
  const uint8_t* const host_;
  const uint64_t size_;
  std::atomic<uint64_t> writes_{0};
  std::atomic<uint64_t> bytes_{0};
};

}  // namespace dsec::pmem
