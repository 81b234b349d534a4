// SPDX-License-Identifier: Apache-2.0
#include "devices/serial/serial_device.h"

#include <algorithm>
#include <string>

#include "absl/strings/escaping.h"
#include "base/json_fields.h"
#include "base/status.h"

namespace dsec::devices {
namespace {

// Register offsets (PC16550D data sheet, table "Register Addresses").
constexpr uint64_t kRbrThrDll = 0;
constexpr uint64_t kIerDlm = 1;
constexpr uint64_t kIirFcr = 2;
constexpr uint64_t kLcr = 3;
constexpr uint64_t kMcr = 4;
constexpr uint64_t kLsr = 5;
constexpr uint64_t kMsr = 6;
constexpr uint64_t kScr = 7;
constexpr uint64_t kNumPorts = 8;

constexpr uint8_t kIerErbfi = 0x01;  // received data available
constexpr uint8_t kIerEtbei = 0x02;  // THR empty
constexpr uint8_t kIerElsi = 0x04;   // receiver line status
constexpr uint8_t kIerEdssi = 0x08;  // modem status
constexpr uint8_t kIerMask = 0x0f;   // bits 7:4 read as zero on a 16550A

constexpr uint8_t kIirNoInt = 0x01;
constexpr uint8_t kIirLineStatus = 0x06;
constexpr uint8_t kIirRxData = 0x04;
constexpr uint8_t kIirThrEmpty = 0x02;
constexpr uint8_t kIirModemStatus = 0x00;
constexpr uint8_t kIirFifoEnabled = 0xc0;  // bits 7:6 mirror FCR bit 0

constexpr uint8_t kFcrEnable = 0x01;
constexpr uint8_t kFcrClearRx = 0x02;

constexpr uint8_t kLcrDlab = 0x80;

constexpr uint8_t kMcrDtr = 0x01;
constexpr uint8_t kMcrRts = 0x02;
constexpr uint8_t kMcrOut1 = 0x04;
constexpr uint8_t kMcrOut2 = 0x08;
constexpr uint8_t kMcrLoop = 0x10;
constexpr uint8_t kMcrMask = 0x1f;

constexpr uint8_t kLsrDr = 0x01;
constexpr uint8_t kLsrOe = 0x02;
constexpr uint8_t kLsrThre = 0x20;
constexpr uint8_t kLsrTemt = 0x40;

constexpr uint8_t kMsrDcts = 0x01;
constexpr uint8_t kMsrDdsr = 0x02;
constexpr uint8_t kMsrTeri = 0x04;
constexpr uint8_t kMsrDdcd = 0x08;
constexpr uint8_t kMsrCts = 0x10;
constexpr uint8_t kMsrDsr = 0x20;
constexpr uint8_t kMsrRi = 0x40;
constexpr uint8_t kMsrDcd = 0x80;
constexpr uint8_t kMsrDeltaMask = 0x0f;

}  // namespace

SerialDevice::SerialDevice(ByteSink* sink, InterruptLine* irq, size_t rx_capacity)
    : sink_(sink), irq_(irq), rx_capacity_(std::max<size_t>(rx_capacity, 1)) {
  absl::MutexLock lock(&mu_);
  msr_ = ComputeMsrState();
}

void SerialDevice::Read(uint64_t offset, std::span<uint8_t> data) {
  bool edge = false;
  {
    absl::MutexLock lock(&mu_);
    // A wider access to this byte-wide device is split into byte cycles, as
    // the ISA bus does.
    for (size_t i = 0; i < data.size(); ++i) {
      if (offset + i >= kNumPorts) {
        data[i] = 0xff;
        bad_accesses_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      data[i] = ReadRegister(offset + i);
    }
    edge = UpdateIrqLevel();
  }
  if (edge) Pulse();
}

void SerialDevice::Write(uint64_t offset, std::span<const uint8_t> data) {
  bool edge = false;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < data.size(); ++i) {
      if (offset + i >= kNumPorts) {
        bad_accesses_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      WriteRegister(offset + i, data[i]);
    }
    edge = UpdateIrqLevel();
  }
  if (edge) Pulse();
}

size_t SerialDevice::EnqueueInput(std::span<const uint8_t> bytes) {
  bool edge = false;
  size_t accepted = 0;
  {
    absl::MutexLock lock(&mu_);
    accepted = std::min(bytes.size(), rx_capacity_ - rx_.size());
    for (size_t i = 0; i < bytes.size(); ++i) PushRx(bytes[i]);
    edge = UpdateIrqLevel();
  }
  if (edge) Pulse();
  return accepted;
}

size_t SerialDevice::RxSpace() const {
  absl::MutexLock lock(&mu_);
  return rx_capacity_ - rx_.size();
}

SerialDevice::Metrics SerialDevice::metrics() const {
  Metrics m;
  m.tx_bytes = tx_bytes_.load(std::memory_order_relaxed);
  m.rx_bytes = rx_bytes_.load(std::memory_order_relaxed);
  m.rx_overflow = rx_overflow_.load(std::memory_order_relaxed);
  m.interrupts = interrupts_.load(std::memory_order_relaxed);
  m.interrupt_errors = interrupt_errors_.load(std::memory_order_relaxed);
  m.bad_accesses = bad_accesses_.load(std::memory_order_relaxed);
  return m;
}

uint8_t SerialDevice::ReadRegister(uint64_t offset) {
  const bool dlab = (lcr_ & kLcrDlab) != 0;
  switch (offset) {
    case kRbrThrDll: {
      if (dlab) return dll_;
      if (rx_.empty()) return 0;
      const uint8_t byte = rx_.front();
      rx_.pop_front();
      return byte;
    }
    case kIerDlm:
      return dlab ? dlm_ : ier_;
    case kIirFcr: {
      const uint8_t iir = ComputeIir();
      // Reading IIR acknowledges a THR-empty interrupt when it is the one
      // reported (data sheet, "Interrupt Control Functions", reset control).
      if ((iir & 0x0f) == kIirThrEmpty) thre_pending_ = false;
      return iir;
    }
    case kLcr:
      return lcr_;
    case kMcr:
      return mcr_;
    case kLsr: {
      uint8_t lsr = kLsrThre | kLsrTemt;  // transmit is instantaneous
      if (!rx_.empty()) lsr |= kLsrDr;
      if (overrun_) lsr |= kLsrOe;
      overrun_ = false;  // error bits clear when LSR is read
      return lsr;
    }
    case kMsr: {
      const uint8_t msr = msr_;
      msr_ &= static_cast<uint8_t>(~kMsrDeltaMask);  // deltas clear when MSR is read
      return msr;
    }
    case kScr:
      return scr_;
  }
  return 0xff;
}

void SerialDevice::WriteRegister(uint64_t offset, uint8_t value) {
  const bool dlab = (lcr_ & kLcrDlab) != 0;
  switch (offset) {
    case kRbrThrDll:
      if (dlab) {
        dll_ = value;
        return;
      }
      if (mcr_ & kMcrLoop) {
        // Loopback: the transmitter feeds the receiver; nothing leaves the chip.
        PushRx(value);
      } else {
        sink_->Put(value);
        tx_bytes_.fetch_add(1, std::memory_order_relaxed);
      }
      // The byte left THR at once, so THR is empty again: a new THRE event.
      thre_pending_ = true;
      return;
    case kIerDlm:
      if (dlab) {
        dlm_ = value;
        return;
      }
      // Enabling ETBEI while THR is empty raises the THRE interrupt; Linux's
      // 8250 driver relies on this to start transmission (and tests for it,
      // UART_BUG_THRE).
      if (!(ier_ & kIerEtbei) && (value & kIerEtbei)) thre_pending_ = true;
      ier_ = value & kIerMask;
      return;
    case kIirFcr:
      // Toggling the FIFO enable bit resets the FIFOs, as does CLEAR_RCVR.
      if (((fcr_ ^ value) & kFcrEnable) || (value & kFcrClearRx)) rx_.clear();
      fcr_ = value & kFcrEnable;
      return;
    case kLcr:
      lcr_ = value;
      return;
    case kMcr:
      mcr_ = value & kMcrMask;
      UpdateMsr();
      return;
    case kLsr:
      return;  // LSR is read-only here (factory test use only)
    case kMsr:
      return;  // read-only
    case kScr:
      scr_ = value;
      return;
  }
}

void SerialDevice::PushRx(uint8_t byte) {
  if (rx_.size() >= rx_capacity_) {
    overrun_ = true;
    rx_overflow_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  rx_.push_back(byte);
  rx_bytes_.fetch_add(1, std::memory_order_relaxed);
}

uint8_t SerialDevice::ComputeIir() const {
  const uint8_t fifo = (fcr_ & kFcrEnable) ? kIirFifoEnabled : 0;
  if ((ier_ & kIerElsi) && overrun_) return fifo | kIirLineStatus;
  if ((ier_ & kIerErbfi) && !rx_.empty()) return fifo | kIirRxData;
  if ((ier_ & kIerEtbei) && thre_pending_) return fifo | kIirThrEmpty;
  if ((ier_ & kIerEdssi) && (msr_ & kMsrDeltaMask)) return fifo | kIirModemStatus;
  return fifo | kIirNoInt;
}

uint8_t SerialDevice::ComputeMsrState() const {
  if (!(mcr_ & kMcrLoop)) {
    // No modem behind the port: report a connected, ready peer so that
    // drivers waiting for CTS/DSR/DCD proceed.
    return kMsrCts | kMsrDsr | kMsrDcd;
  }
  // Loopback wiring (data sheet, MCR bit 4): RTS->CTS, DTR->DSR, OUT1->RI,
  // OUT2->DCD.
  uint8_t state = 0;
  if (mcr_ & kMcrRts) state |= kMsrCts;
  if (mcr_ & kMcrDtr) state |= kMsrDsr;
  if (mcr_ & kMcrOut1) state |= kMsrRi;
  if (mcr_ & kMcrOut2) state |= kMsrDcd;
  return state;
}

void SerialDevice::UpdateMsr() {
  const uint8_t old_state = msr_ & static_cast<uint8_t>(~kMsrDeltaMask);
  const uint8_t new_state = ComputeMsrState();
  const uint8_t changed = old_state ^ new_state;
  uint8_t delta = msr_ & kMsrDeltaMask;
  if (changed & kMsrCts) delta |= kMsrDcts;
  if (changed & kMsrDsr) delta |= kMsrDdsr;
  if ((old_state & kMsrRi) && !(new_state & kMsrRi)) delta |= kMsrTeri;  // trailing edge
  if (changed & kMsrDcd) delta |= kMsrDdcd;
  msr_ = new_state | delta;
}

bool SerialDevice::UpdateIrqLevel() {
  const bool level = (ComputeIir() & kIirNoInt) == 0;
  const bool rising = level && !irq_level_;
  irq_level_ = level;
  return rising;
}

void SerialDevice::Pulse() {
  interrupts_.fetch_add(1, std::memory_order_relaxed);
  if (irq_ == nullptr) return;
  if (!irq_->Trigger().ok()) interrupt_errors_.fetch_add(1, std::memory_order_relaxed);
}

nlohmann::json SerialDevice::SaveState() const {
  absl::MutexLock lock(&mu_);
  std::string rx(rx_.begin(), rx_.end());
  return {{"ier", ier_},   {"lcr", lcr_},         {"mcr", mcr_},
          {"fcr", fcr_},   {"scr", scr_},         {"dll", dll_},
          {"dlm", dlm_},   {"msr", msr_},         {"overrun", overrun_},
          {"thre_pending", thre_pending_},        {"irq_level", irq_level_},
          {"rx", absl::Base64Escape(rx)}};
}

absl::Status SerialDevice::RestoreState(const nlohmann::json& state) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(state, "serial"));
  DSEC_ASSIGN_OR_RETURN(uint64_t ier, f.Uint("ier", 0, kIerMask));
  DSEC_ASSIGN_OR_RETURN(uint64_t lcr, f.Uint("lcr", 0, 0xff));
  DSEC_ASSIGN_OR_RETURN(uint64_t mcr, f.Uint("mcr", 0, 0xff));
  DSEC_ASSIGN_OR_RETURN(uint64_t fcr, f.Uint("fcr", 0, 0xff));
  DSEC_ASSIGN_OR_RETURN(uint64_t scr, f.Uint("scr", 0, 0xff));
  DSEC_ASSIGN_OR_RETURN(uint64_t dll, f.Uint("dll", 0, 0xff));
  DSEC_ASSIGN_OR_RETURN(uint64_t dlm, f.Uint("dlm", 0, 0xff));
  DSEC_ASSIGN_OR_RETURN(uint64_t msr, f.Uint("msr", 0, 0xff));
  DSEC_ASSIGN_OR_RETURN(bool overrun, f.Bool("overrun"));
  DSEC_ASSIGN_OR_RETURN(bool thre_pending, f.Bool("thre_pending"));
  DSEC_ASSIGN_OR_RETURN(bool irq_level, f.Bool("irq_level"));
  DSEC_ASSIGN_OR_RETURN(std::string rx, f.Bytes("rx", 0, rx_capacity_));
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  absl::MutexLock lock(&mu_);
  ier_ = static_cast<uint8_t>(ier);
  lcr_ = static_cast<uint8_t>(lcr);
  mcr_ = static_cast<uint8_t>(mcr);
  fcr_ = static_cast<uint8_t>(fcr);
  scr_ = static_cast<uint8_t>(scr);
  dll_ = static_cast<uint8_t>(dll);
  dlm_ = static_cast<uint8_t>(dlm);
  msr_ = static_cast<uint8_t>(msr);
  overrun_ = overrun;
  thre_pending_ = thre_pending;
  irq_level_ = irq_level;
  rx_.assign(rx.begin(), rx.end());
  return absl::OkStatus();
}

}  // namespace dsec::devices
