// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "absl/synchronization/mutex.h"
#include "platform/bus/bus.h"

namespace dsec::devices {

// The controller half of an 8042 keyboard controller, enough for Linux's
// i8042 probe and for the guest's "reset through the keyboard controller"
// reboot path. No keyboard or mouse sits behind it: bytes written to the
// devices (data port with no controller command pending, command 0xD4) are
// ignored, and no IRQ 1/12 is raised.
//
// Mapping: offset 0 is the data port (0x60), offset 4 the status/command
// port (0x64); map it at 0x60 with length 5. Offsets 1-3 read 0xff and ignore
// writes (port 0x61 is handled by KVM's in-kernel PIT speaker port).
//
// Commands (IBM PS/2 Technical Reference, "Keyboard/Auxiliary Device
// Controller", command set): 0x20 read / 0x60 write command byte, 0xA7/0xA8
// disable/enable aux, 0xA9 aux interface test (0x00), 0xAA self-test (0x55),
// 0xAB keyboard interface test (0x00), 0xAD/0xAE disable/enable keyboard,
// 0xD0/0xD1 read/write output port (bit 0 clear = reset), 0xD2/0xD3 write
// keyboard/aux output buffer (echo), 0xD4 write to aux device, 0xFE and the
// other 0xF0-0xFF pulse commands (bit 0 clear pulses the reset line).
//
// Threads: vCPU threads call Read/Write (state behind a mutex). The reset
// callback runs on the vCPU thread, without the lock held; it must be quick
// and thread-safe (e.g. set a flag and kick the vCPUs).
class I8042Device : public bus::BusDevice {
 public:
  struct Metrics {
    uint64_t resets = 0;            // reset requests passed to the callback
    uint64_t unknown_commands = 0;
    uint64_t ignored_device_writes = 0;  // bytes meant for the absent keyboard/mouse
  };

  explicit I8042Device(std::function<void()> on_reset);

  void Read(uint64_t offset, std::span<uint8_t> data) override;
  void Write(uint64_t offset, std::span<const uint8_t> data) override;

  Metrics metrics() const;

  // Snapshots (vmm/vm): the device's state as JSON, and back into a device
  // that no vCPU uses yet. A snapshot is untrusted input: every field is
  // checked and an error names it.
  nlohmann::json SaveState() const;
  absl::Status RestoreState(const nlohmann::json& state);

 private:
  struct OutByte {
    uint8_t value;
    bool aux;
  };
  uint8_t ReadData() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint8_t ReadStatus() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Both return true when the reset line must be pulsed.
  bool WriteData(uint8_t value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool WriteCommand(uint8_t command) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PushOutput(uint8_t value, bool aux = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::function<void()> on_reset_;

  mutable absl::Mutex mu_;
  uint8_t command_byte_ ABSL_GUARDED_BY(mu_);
  uint8_t output_port_ ABSL_GUARDED_BY(mu_);
  uint8_t pending_command_ ABSL_GUARDED_BY(mu_) = 0;  // awaiting its data byte
  bool last_write_was_command_ ABSL_GUARDED_BY(mu_) = false;
  uint8_t last_read_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<OutByte> output_ ABSL_GUARDED_BY(mu_);

  std::atomic<uint64_t> resets_{0};
  std::atomic<uint64_t> unknown_commands_{0};
  std::atomic<uint64_t> ignored_device_writes_{0};
};

}  // namespace dsec::devices
