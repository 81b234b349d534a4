// SPDX-License-Identifier: Apache-2.0
#include "devices/acpi/acpi_pm_device.h"

#include <utility>

#include "base/little_endian.h"
#include "base/json_fields.h"
#include "base/status.h"

namespace dsec::devices {

class AcpiPmDevice::EventBlock : public bus::BusDevice {
 public:
  explicit EventBlock(AcpiPmDevice* d) : d_(d) {}
  void Read(uint64_t offset, std::span<uint8_t> data) override { d_->ReadEvent(offset, data); }
  void Write(uint64_t offset, std::span<const uint8_t> data) override { d_->WriteEvent(offset, data); }

 private:
  AcpiPmDevice* d_;
};

class AcpiPmDevice::ControlBlock : public bus::BusDevice {
 public:
  explicit ControlBlock(AcpiPmDevice* d) : d_(d) {}
  void Read(uint64_t offset, std::span<uint8_t> data) override { d_->ReadControl(offset, data); }
  void Write(uint64_t offset, std::span<const uint8_t> data) override {
    d_->WriteControl(offset, data);
  }

 private:
  AcpiPmDevice* d_;
};

// The views hold a raw pointer: the device owns them and hands out shared
// pointers whose lifetime the VM bounds (the bus is emptied before the
// device goes, with the vCPUs stopped).
AcpiPmDevice::AcpiPmDevice(uint8_t s5_sleep_type, std::function<void()> on_soft_off)
    : s5_sleep_type_(s5_sleep_type),
      on_soft_off_(std::move(on_soft_off)),
      event_(std::make_shared<EventBlock>(this)),
      control_(std::make_shared<ControlBlock>(this)) {}

AcpiPmDevice::Metrics AcpiPmDevice::metrics() const {
  absl::MutexLock lock(&mu_);
  return metrics_;
}

void AcpiPmDevice::ReadEvent(uint64_t offset, std::span<uint8_t> data) {
  absl::MutexLock lock(&mu_);
  // PM1_STS (bytes 0-1) is always 0; PM1_EN (bytes 2-3) as written.
  ReadLeWindow(uint64_t{enable_} << 16, 4, offset, data);
}

void AcpiPmDevice::WriteEvent(uint64_t offset, std::span<const uint8_t> data) {
  absl::MutexLock lock(&mu_);
  // Writes to PM1_STS clear bits that are never set; PM1_EN is stored.
  enable_ = static_cast<uint16_t>(WriteLeWindow(uint64_t{enable_} << 16, 4, offset, data) >> 16);
}

void AcpiPmDevice::ReadControl(uint64_t offset, std::span<uint8_t> data) {
  absl::MutexLock lock(&mu_);
  ReadLeWindow(control_value_ | kSciEn, 2, offset, data);
}

void AcpiPmDevice::WriteControl(uint64_t offset, std::span<const uint8_t> data) {
  bool soft_off = false;
  {
    absl::MutexLock lock(&mu_);
    const uint16_t value = static_cast<uint16_t>(WriteLeWindow(control_value_, 2, offset, data));
    // SLP_EN is write-only and self-clearing; SCI_EN is read-only here.
    control_value_ = static_cast<uint16_t>(value & ~(kSlpEn | kSciEn));
    if (value & kSlpEn) {
      const uint8_t type = static_cast<uint8_t>((value & kSlpTypMask) >> kSlpTypShift);
      if (type == s5_sleep_type_) {
        ++metrics_.soft_off;
        soft_off = true;
      } else {
        ++metrics_.ignored_sleeps;
      }
    }
  }
  if (soft_off && on_soft_off_) on_soft_off_();
}


nlohmann::json AcpiPmDevice::SaveState() const {
  absl::MutexLock lock(&mu_);
  return {{"enable", enable_}, {"control", control_value_}};
}

absl::Status AcpiPmDevice::RestoreState(const nlohmann::json& state) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(state, "acpi_pm"));
  DSEC_ASSIGN_OR_RETURN(uint64_t enable, f.Uint("enable", 0, 0xffff));
  DSEC_ASSIGN_OR_RETURN(uint64_t control, f.Uint("control", 0, 0xffff));
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  absl::MutexLock lock(&mu_);
  enable_ = static_cast<uint16_t>(enable);
  control_value_ = static_cast<uint16_t>(control);
  return absl::OkStatus();
}
}  // namespace dsec::devices
