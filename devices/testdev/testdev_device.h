// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "platform/bus/bus.h"
#include "platform/memory/guest_memory.h"

namespace dsec::devices {

// The monitor side of the test-report device (devices/testdev/testdev_regs.h),
// one 4 KiB MMIO page, normally mapped at DSEC_TESTDEV_BASE.
//
// Guest protocol: write MSG_ADDR (one 8-byte store, or two 4-byte stores at
// 0x08 and 0x0c), then MSG_LEN; the LEN write copies the message out of guest
// memory (bounds-checked, len <= DSEC_TESTDEV_MAX_MSG), drops every byte
// outside printable ASCII 0x20-0x7e (so a guest cannot inject control
// sequences or invalid UTF-8 into logs), and hands it to the Listener. EVENT
// writes are timestamped with the clock (CLOCK_MONOTONIC by default). Only
// naturally aligned 4- and 8-byte accesses count; others are ignored (reads
// return 0) and counted. Writes to 0x10/0x18/0x20 may be 8 bytes wide; EVENT
// and SHUTDOWN use the low 32 bits.
//
// Everything here is guest-triggerable, so it is budgeted: at most
// Limits::max_messages messages and max_message_bytes bytes, max_events
// events, and one shutdown (the first; later ones are counted, not
// delivered). Invalid messages are counted and logged rate-limited.
//
// Threads: Read/Write run on vCPU threads, concurrently. The Listener is
// called on the vCPU thread, without the device lock: it must be thread-safe
// and must not block or do I/O (queue to the event loop instead). The memory,
// listener and clock must outlive the device.
class TestDevice : public bus::BusDevice {
 public:
  class Listener {
   public:
    virtual ~Listener() = default;
    virtual void OnMessage(std::string_view /*message*/) {}
    virtual void OnEvent(uint32_t /*code*/, int64_t /*mono_ns*/) {}
    virtual void OnShutdown(uint32_t /*code*/) {}
  };

  struct Limits {
    uint64_t max_messages = 4096;
    uint64_t max_message_bytes = 1 << 20;
    uint64_t max_events = 4096;
  };

  struct Metrics {
    uint64_t messages = 0;          // delivered
    uint64_t message_bytes = 0;     // guest bytes of delivered messages (before stripping)
    uint64_t messages_dropped = 0;  // over budget
    uint64_t invalid_messages = 0;  // too long or outside guest memory
    uint64_t events = 0;
    uint64_t events_dropped = 0;
    uint64_t shutdowns_ignored = 0;  // after the first
    uint64_t ignored_accesses = 0;   // bad size, alignment or offset
  };

  TestDevice(const memory::GuestMemory& memory, Listener* listener,
             const Clock* clock = &MonotonicClock::Get());
  TestDevice(const memory::GuestMemory& memory, Listener* listener, const Clock* clock,
             Limits limits);

  void Read(uint64_t offset, std::span<uint8_t> data) override;
  void Write(uint64_t offset, std::span<const uint8_t> data) override;

  Metrics metrics() const;

  // Snapshots (vmm/vm): the device's state as JSON, and back into a device
  // that no vCPU uses yet. A snapshot is untrusted input: every field is
  // checked and an error names it.
  nlohmann::json SaveState() const;
  absl::Status RestoreState(const nlohmann::json& state);

 private:
  void SendMessage(uint64_t len);
  void SendEvent(uint32_t code);
  void SendShutdown(uint32_t code);

  const memory::GuestMemory& memory_;
  Listener* const listener_;
  const Clock* const clock_;
  const Limits limits_;

  mutable absl::Mutex mu_;
  uint64_t msg_addr_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t budget_messages_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t budget_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t budget_events_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_sent_ ABSL_GUARDED_BY(mu_) = false;

  std::atomic<uint64_t> messages_{0};
  std::atomic<uint64_t> message_bytes_{0};
  std::atomic<uint64_t> messages_dropped_{0};
  std::atomic<uint64_t> invalid_messages_{0};
  std::atomic<uint64_t> events_{0};
  std::atomic<uint64_t> events_dropped_{0};
  std::atomic<uint64_t> shutdowns_ignored_{0};
  std::atomic<uint64_t> ignored_accesses_{0};
};

}  // namespace dsec::devices
