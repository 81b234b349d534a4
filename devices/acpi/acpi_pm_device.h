// SPDX-License-Identifier: Apache-2.0
// The ACPI fixed-hardware PM1a register blocks (ACPI 6.4 section 4.8.3):
// how a guest powers itself off. The FADT (platform/arch/x86_64/acpi.h)
// points the guest at them; Linux's acpi_power_off() writes SLP_TYP (from
// \_S5) and then SLP_EN to PM1_CNT, and this device reports soft-off then.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "absl/synchronization/mutex.h"
#include "platform/bus/bus.h"

namespace dsec::devices {

// Two bus views over one register file:
//   event_block()   4 ports: PM1_STS (offset 0, write 1 to clear) and PM1_EN
//                   (offset 2, read/write). No event ever becomes pending:
//                   the machine has no power button, RTC alarm or timer
//                   overflow to report, so PM1_STS reads 0 and no SCI is
//                   raised.
//   control_block() 2 ports: PM1_CNT. SCI_EN (bit 0) always reads 1 (the
//                   machine is always in ACPI mode: the FADT has no SMI
//                   command port); SLP_TYP (bits 10-12) is stored; writing
//                   SLP_EN (bit 13, write-only) with SLP_TYP = the \_S5
//                   value calls `on_soft_off`. Other sleep types are not
//                   offered in the DSDT and are counted and ignored.
// Accesses of 1, 2 or 4 bytes at any offset inside a block work as the
// byte-wise register file; reads beyond it are 0.
//
// Threads: vCPU threads (one mutex). `on_soft_off` runs on the vCPU thread
// without the lock held; it must be quick and thread-safe (Vm::RequestStop).
class AcpiPmDevice {
 public:
  struct Metrics {
    uint64_t soft_off = 0;          // S5 requests passed to the callback
    uint64_t ignored_sleeps = 0;    // SLP_EN with another SLP_TYP
  };

  AcpiPmDevice(uint8_t s5_sleep_type, std::function<void()> on_soft_off);

  std::shared_ptr<bus::BusDevice> event_block() const { return event_; }
  std::shared_ptr<bus::BusDevice> control_block() const { return control_; }
  Metrics metrics() const;

  // Snapshots (vmm/vm): the device's state as JSON, and back into a device
  // that no vCPU uses yet. A snapshot is untrusted input: every field is
  // checked and an error names it.
  nlohmann::json SaveState() const;
  absl::Status RestoreState(const nlohmann::json& state);

  // PM1_CNT bits.
  static constexpr uint16_t kSciEn = 1u << 0;
  static constexpr uint16_t kSlpTypShift = 10;
  static constexpr uint16_t kSlpTypMask = 7u << kSlpTypShift;
  static constexpr uint16_t kSlpEn = 1u << 13;

 private:
  class EventBlock;
  class ControlBlock;
  void ReadEvent(uint64_t offset, std::span<uint8_t> data);
  void WriteEvent(uint64_t offset, std::span<const uint8_t> data);
  void ReadControl(uint64_t offset, std::span<uint8_t> data);
  void WriteControl(uint64_t offset, std::span<const uint8_t> data);

  const uint8_t s5_sleep_type_;
  const std::function<void()> on_soft_off_;
  std::shared_ptr<bus::BusDevice> event_;
  std::shared_ptr<bus::BusDevice> control_;
  mutable absl::Mutex mu_;
  uint16_t enable_ ABSL_GUARDED_BY(mu_) = 0;
  uint16_t control_value_ ABSL_GUARDED_BY(mu_) = 0;
  Metrics metrics_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dsec::devices
