// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "platform/bus/bus.h"

namespace dsec::bus {

// Presents `device` at another offset: a range inserted on the bus through
// this facade reaches the device at `offset + shift`. For devices whose
// registers are not contiguous on the bus (the i8042's ports 0x60 and 0x64
// with 0x61, the PIT's port B, in between).
class OffsetBusDevice : public BusDevice {
 public:
  OffsetBusDevice(std::shared_ptr<BusDevice> device, uint64_t shift)
      : device_(std::move(device)), shift_(shift) {}
  void Read(uint64_t offset, std::span<uint8_t> data) override {
    device_->Read(offset + shift_, data);
  }
  void Write(uint64_t offset, std::span<const uint8_t> data) override {
    device_->Write(offset + shift_, data);
  }

 private:
  std::shared_ptr<BusDevice> device_;
  uint64_t shift_;
};

}  // namespace dsec::bus
