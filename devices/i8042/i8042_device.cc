// SPDX-License-Identifier: Apache-2.0
#include "devices/i8042/i8042_device.h"

#include <string>

#include "absl/strings/str_cat.h"
#include <utility>

#include "base/json_fields.h"
#include "base/status.h"

namespace dsec::devices {
namespace {

constexpr uint64_t kDataPort = 0;    // 0x60
constexpr uint64_t kStatusPort = 4;  // 0x64

// Status register bits.
constexpr uint8_t kStatusObf = 0x01;      // output buffer full
constexpr uint8_t kStatusSys = 0x04;      // system flag (mirrors command byte bit 2)
constexpr uint8_t kStatusCommand = 0x08;  // last write went to port 0x64
constexpr uint8_t kStatusUnlocked = 0x10; // keyboard not inhibited
constexpr uint8_t kStatusAuxData = 0x20;  // output byte comes from the aux port

// Command byte ("controller configuration byte") bits.
constexpr uint8_t kCtrSys = 0x04;
constexpr uint8_t kCtrKbdDisable = 0x10;
constexpr uint8_t kCtrAuxDisable = 0x20;
// Keyboard and aux interrupts enabled, system flag, translation: what a
// PC BIOS leaves behind.
constexpr uint8_t kCtrDefault = 0x47;

// Output port bit 0 is the CPU reset line (active low); bit 1 is A20.
constexpr uint8_t kOutPortReset = 0x01;
constexpr uint8_t kOutPortDefault = 0x03;

constexpr uint8_t kCmdReadCtr = 0x20;
constexpr uint8_t kCmdWriteCtr = 0x60;
constexpr uint8_t kCmdAuxDisable = 0xa7;
constexpr uint8_t kCmdAuxEnable = 0xa8;
constexpr uint8_t kCmdAuxTest = 0xa9;
constexpr uint8_t kCmdSelfTest = 0xaa;
constexpr uint8_t kCmdKbdTest = 0xab;
constexpr uint8_t kCmdKbdDisable = 0xad;
constexpr uint8_t kCmdKbdEnable = 0xae;
constexpr uint8_t kCmdReadOutPort = 0xd0;
constexpr uint8_t kCmdWriteOutPort = 0xd1;
constexpr uint8_t kCmdWriteKbdOut = 0xd2;
constexpr uint8_t kCmdWriteAuxOut = 0xd3;
constexpr uint8_t kCmdWriteAux = 0xd4;
constexpr uint8_t kCmdPulseBase = 0xf0;  // 0xF0-0xFF: pulse output port bits 3:0 low

constexpr uint8_t kSelfTestOk = 0x55;
constexpr uint8_t kInterfaceTestOk = 0x00;

// The real controller has a one-byte output buffer; a few bytes of slack
// cover command responses the guest has not read yet, and bound memory.
constexpr size_t kMaxOutput = 16;

}  // namespace

I8042Device::I8042Device(std::function<void()> on_reset) : on_reset_(std::move(on_reset)) {
  absl::MutexLock lock(&mu_);
  command_byte_ = kCtrDefault;
  output_port_ = kOutPortDefault;
}

void I8042Device::Read(uint64_t offset, std::span<uint8_t> data) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < data.size(); ++i) {
    switch (offset + i) {
      case kDataPort:
        data[i] = ReadData();
        break;
      case kStatusPort:
        data[i] = ReadStatus();
        break;
      default:
        data[i] = 0xff;
    }
  }
}

void I8042Device::Write(uint64_t offset, std::span<const uint8_t> data) {
  bool reset = false;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < data.size(); ++i) {
      switch (offset + i) {
        case kDataPort:
          reset |= WriteData(data[i]);
          break;
        case kStatusPort:
          reset |= WriteCommand(data[i]);
          break;
        default:
          break;
      }
    }
  }
  if (reset) {
    resets_.fetch_add(1, std::memory_order_relaxed);
    if (on_reset_) on_reset_();
  }
}

I8042Device::Metrics I8042Device::metrics() const {
  Metrics m;
  m.resets = resets_.load(std::memory_order_relaxed);
  m.unknown_commands = unknown_commands_.load(std::memory_order_relaxed);
  m.ignored_device_writes = ignored_device_writes_.load(std::memory_order_relaxed);
  return m;
}

uint8_t I8042Device::ReadData() {
  // With the buffer empty, real controllers return the last byte again.
  if (!output_.empty()) {
    last_read_ = output_.front().value;
    output_.pop_front();
  }
  return last_read_;
}

uint8_t I8042Device::ReadStatus() const {
  uint8_t status = kStatusUnlocked;
  if (!output_.empty()) {
    status |= kStatusObf;
    if (output_.front().aux) status |= kStatusAuxData;
  }
  if (command_byte_ & kCtrSys) status |= kStatusSys;
  if (last_write_was_command_) status |= kStatusCommand;
  return status;
}

void I8042Device::PushOutput(uint8_t value, bool aux) {
  if (output_.size() >= kMaxOutput) output_.pop_front();
  output_.push_back(OutByte{value, aux});
}

bool I8042Device::WriteData(uint8_t value) {
  last_write_was_command_ = false;
  const uint8_t command = std::exchange(pending_command_, 0);
  switch (command) {
    case kCmdWriteCtr:
      command_byte_ = value;
      return false;
    case kCmdWriteOutPort:
      output_port_ = value;
      return (value & kOutPortReset) == 0;
    case kCmdWriteKbdOut:
      PushOutput(value);
      return false;
    case kCmdWriteAuxOut:
      PushOutput(value, /*aux=*/true);
      return false;
    case kCmdWriteAux:
    default:
      // A byte for the keyboard or mouse, neither of which exists.
      ignored_device_writes_.fetch_add(1, std::memory_order_relaxed);
      return false;
  }
}

bool I8042Device::WriteCommand(uint8_t command) {
  last_write_was_command_ = true;
  pending_command_ = 0;
  switch (command) {
    case kCmdReadCtr:
      PushOutput(command_byte_);
      return false;
    case kCmdWriteCtr:
    case kCmdWriteOutPort:
    case kCmdWriteKbdOut:
    case kCmdWriteAuxOut:
    case kCmdWriteAux:
      pending_command_ = command;
      return false;
    case kCmdAuxDisable:
      command_byte_ |= kCtrAuxDisable;
      return false;
    case kCmdAuxEnable:
      command_byte_ &= static_cast<uint8_t>(~kCtrAuxDisable);
      return false;
    case kCmdAuxTest:
    case kCmdKbdTest:
      PushOutput(kInterfaceTestOk);
      return false;
    case kCmdSelfTest:
      // A passed self-test sets the system flag (POST complete).
      command_byte_ |= kCtrSys;
      PushOutput(kSelfTestOk);
      return false;
    case kCmdKbdDisable:
      command_byte_ |= kCtrKbdDisable;
      return false;
    case kCmdKbdEnable:
      command_byte_ &= static_cast<uint8_t>(~kCtrKbdDisable);
      return false;
    case kCmdReadOutPort:
      PushOutput(output_port_);
      return false;
    default:
      if (command >= kCmdPulseBase) {
        // Bits 3:0 select output port lines to pulse low; bit 0 is reset.
        return (command & kOutPortReset) == 0;
      }
      unknown_commands_.fetch_add(1, std::memory_order_relaxed);
      return false;
  }
}


nlohmann::json I8042Device::SaveState() const {
  absl::MutexLock lock(&mu_);
  nlohmann::json out = nlohmann::json::array();
  for (const OutByte& b : output_) out.push_back({{"value", b.value}, {"aux", b.aux}});
  return {{"command_byte", command_byte_},
          {"output_port", output_port_},
          {"pending_command", pending_command_},
          {"last_write_was_command", last_write_was_command_},
          {"last_read", last_read_},
          {"output", std::move(out)}};
}

absl::Status I8042Device::RestoreState(const nlohmann::json& state) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(state, "i8042"));
  DSEC_ASSIGN_OR_RETURN(uint64_t command_byte, f.Uint("command_byte", 0, 0xff));
  DSEC_ASSIGN_OR_RETURN(uint64_t output_port, f.Uint("output_port", 0, 0xff));
  DSEC_ASSIGN_OR_RETURN(uint64_t pending_command, f.Uint("pending_command", 0, 0xff));
  DSEC_ASSIGN_OR_RETURN(bool last_write_was_command, f.Bool("last_write_was_command"));
  DSEC_ASSIGN_OR_RETURN(uint64_t last_read, f.Uint("last_read", 0, 0xff));
  const nlohmann::json* out = f.Raw("output");
  const std::string out_path = f.Path("output");
  if (out == nullptr || !out->is_array() || out->size() > kMaxOutput) {
    return InvalidField(out_path, absl::StrCat(out_path, " must be a list of at most ", kMaxOutput,
                                               " bytes"));
  }
  std::deque<OutByte> output;
  for (size_t i = 0; i < out->size(); ++i) {
    DSEC_ASSIGN_OR_RETURN(JsonFields b, JsonFields::Of((*out)[i], JsonFields::ItemPath(out_path, i)));
    DSEC_ASSIGN_OR_RETURN(uint64_t value, b.Uint("value", 0, 0xff));
    DSEC_ASSIGN_OR_RETURN(bool aux, b.Bool("aux"));
    DSEC_RETURN_IF_ERROR(b.RejectUnknown());
    output.push_back(OutByte{static_cast<uint8_t>(value), aux});
  }
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  absl::MutexLock lock(&mu_);
  command_byte_ = static_cast<uint8_t>(command_byte);
  output_port_ = static_cast<uint8_t>(output_port);
  pending_command_ = static_cast<uint8_t>(pending_command);
  last_write_was_command_ = last_write_was_command;
  last_read_ = static_cast<uint8_t>(last_read);
  output_ = std::move(output);
  return absl::OkStatus();
}
}  // namespace dsec::devices
