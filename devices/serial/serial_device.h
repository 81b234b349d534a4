// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "absl/synchronization/mutex.h"
#include "platform/interrupt/interrupt_line.h"
#include "devices/serial/byte_sink.h"
#include "platform/bus/bus.h"

namespace dsec::devices {

// A 16550A UART register model (TI/National PC16550D data sheet, "Register
// Description"), 8 byte-wide ports starting at offset 0 (the monitor maps it
// at 0x3f8 with IRQ 4).
//
// Transmit is instantaneous: a THR write goes straight to the ByteSink, so
// LSR.THRE and LSR.TEMT always read as set and output never stalls the guest.
// Receive: the event loop pushes host input with EnqueueInput() into a bounded
// RX FIFO (its capacity is a host-side buffer, independent of the 16-byte
// FIFO of real hardware; FCR only changes what IIR reports). Bytes that do not
// fit are dropped, counted, and flagged to the guest as an overrun (LSR.OE).
//
// Interrupts (data sheet table "Interrupt Control Functions"), by priority:
// receiver line status (IER.ELSI and LSR.OE), received data available
// (IER.ERBFI and RX FIFO non-empty; the character-timeout variant is not
// modelled), THR empty (IER.ETBEI; asserted when ETBEI goes 0->1 or after a
// THR write, cleared by reading IIR while it is the reported source or by
// writing THR), modem status (IER.EDSSI and any MSR delta bit). The
// combined INTR level is modelled and every rising edge triggers the
// InterruptLine once. MCR.OUT2 does not gate the line (as in most VMMs).
//
// Threads: Read/Write from vCPU threads, EnqueueInput from the event loop;
// all state is behind one mutex. The sink is called with the mutex held, so
// concurrent writers' bytes reach it in THR-write order; the sink must not
// call back into this device.
class SerialDevice : public bus::BusDevice {
 public:
  static constexpr size_t kDefaultRxCapacity = 1024;

  struct Metrics {
    uint64_t tx_bytes = 0;        // THR writes sent to the sink
    uint64_t rx_bytes = 0;        // bytes accepted into the RX FIFO (incl. loopback)
    uint64_t rx_overflow = 0;     // bytes dropped because the RX FIFO was full
    uint64_t interrupts = 0;      // pulses on the interrupt line
    uint64_t interrupt_errors = 0;
    uint64_t bad_accesses = 0;    // accesses not one byte wide or out of range
  };

  // `sink` and `irq` must outlive the device.
  SerialDevice(ByteSink* sink, InterruptLine* irq, size_t rx_capacity = kDefaultRxCapacity);

  void Read(uint64_t offset, std::span<uint8_t> data) override;
  void Write(uint64_t offset, std::span<const uint8_t> data) override;

  // Appends host input to the RX FIFO; returns how many bytes fit (the rest
  // are dropped and counted). Callers that want back-pressure instead of loss
  // check RxSpace() first and read only that much from their source.
  size_t EnqueueInput(std::span<const uint8_t> bytes);
  size_t RxSpace() const;

  Metrics metrics() const;

  // Snapshots (vmm/vm): the device's state as JSON, and back into a device
  // that no vCPU uses yet. A snapshot is untrusted input: every field is
  // checked and an error names it.
  nlohmann::json SaveState() const;
  absl::Status RestoreState(const nlohmann::json& state);

 private:
  uint8_t ReadRegister(uint64_t offset) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteRegister(uint64_t offset, uint8_t value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PushRx(uint8_t byte) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint8_t ComputeIir() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint8_t ComputeMsrState() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateMsr() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recomputes the INTR level; true on a rising edge (caller triggers).
  bool UpdateIrqLevel() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Pulse();

  ByteSink* const sink_;
  InterruptLine* const irq_;
  const size_t rx_capacity_;

  mutable absl::Mutex mu_;
  std::deque<uint8_t> rx_ ABSL_GUARDED_BY(mu_);
  uint8_t ier_ ABSL_GUARDED_BY(mu_) = 0;
  uint8_t lcr_ ABSL_GUARDED_BY(mu_) = 0x03;  // 8N1
  uint8_t mcr_ ABSL_GUARDED_BY(mu_) = 0;
  uint8_t fcr_ ABSL_GUARDED_BY(mu_) = 0;     // only the FIFO-enable bit is kept
  uint8_t scr_ ABSL_GUARDED_BY(mu_) = 0;
  uint8_t dll_ ABSL_GUARDED_BY(mu_) = 0x0c;  // divisor 12: 9600 baud
  uint8_t dlm_ ABSL_GUARDED_BY(mu_) = 0;
  uint8_t msr_ ABSL_GUARDED_BY(mu_) = 0;     // state bits 7:4 and delta bits 3:0
  bool overrun_ ABSL_GUARDED_BY(mu_) = false;
  bool thre_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool irq_level_ ABSL_GUARDED_BY(mu_) = false;

  std::atomic<uint64_t> tx_bytes_{0};
  std::atomic<uint64_t> rx_bytes_{0};
  std::atomic<uint64_t> rx_overflow_{0};
  std::atomic<uint64_t> interrupts_{0};
  std::atomic<uint64_t> interrupt_errors_{0};
  std::atomic<uint64_t> bad_accesses_{0};
};

}  // namespace dsec::devices
