// SPDX-License-Identifier: Apache-2.0
// Feeds snapshot device states to the devices' RestoreState (what
// `dsec-monitor --restore` gives them from a manifest that passed its CRC:
// a hostile snapshot's states): the serial port, i8042, ACPI PM, PIT, test
// device and a virtio-mmio transport with its device. Each must answer an
// error or take the state, never crash; a state taken must save again into
// one the same kind of device takes. Half the inputs are raw JSON; the
// other half start from the device's own saved state and change fields
// (values, types, names) picked by the bytes, to get past the first check.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/event_loop.h"
#include "base/status.h"
#include "devices/acpi/acpi_pm_device.h"
#include "devices/i8042/i8042_device.h"
#include "devices/pit/pit_device.h"
#include "devices/serial/serial_device.h"
#include "devices/testdev/testdev_device.h"
#include "devices/virtio/mmio_transport.h"
#include "devices/virtio/virtio_device.h"
#include "fuzzer/FuzzedDataProvider.h"
#include "nlohmann/json.hpp"
#include "platform/interrupt/fake_interrupt_line.h"
#include "platform/memory/fake_guest_memory.h"

namespace {

using nlohmann::json;

class NullSink : public dsec::devices::ByteSink {
 public:
  void Put(std::span<const uint8_t>) override {}
};

// A virtio device with two queues and a saved state of its own.
class TwoQueues : public dsec::virtio::VirtioDevice {
 public:
  dsec::virtio::DeviceType device_type() const override { return dsec::virtio::DeviceType::kEntropy; }
  uint64_t device_features() const override { return dsec::virtio::kFeatureRingEventIdx; }
  uint16_t num_queues() const override { return 2; }
  uint16_t queue_max_size(uint16_t) const override { return 16; }
  void ReadConfig(uint64_t, std::span<uint8_t> data) override {
    for (auto& b : data) b = 0;
  }
  void WriteConfig(uint64_t, std::span<const uint8_t>) override {}
  absl::Status Activate(const dsec::virtio::ActivateContext&) override { return absl::OkStatus(); }
  void QueueNotify(uint16_t) override {}
  void Reset() override {}
  absl::StatusOr<json> SaveState() const override { return json::object(); }
  absl::Status RestoreState(const json& state) override {
    return state.is_object() ? absl::OkStatus() : absl::InvalidArgumentError("not an object");
  }
};

json Value(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0: return in.ConsumeIntegral<uint8_t>();
    case 1: return in.ConsumeIntegral<int64_t>();
    case 2: return in.ConsumeIntegral<uint64_t>() >> in.ConsumeIntegralInRange(0, 63);
    case 3: return in.ConsumeBool();
    case 4: return in.ConsumeRandomLengthString(24);
    case 5: return nullptr;
    case 6: return json::array({in.ConsumeIntegral<uint16_t>()});
    default: return json::object();
  }
}

// Changes up to 6 places of `j` (nested objects and arrays included).
void Mutate(FuzzedDataProvider& in, json& j, int depth = 0) {
  for (int n = in.ConsumeIntegralInRange(0, 6); n > 0 && in.remaining_bytes() > 0; --n) {
    if (j.is_object() && !j.empty()) {
      auto it = j.begin();
      std::advance(it, in.ConsumeIntegralInRange<size_t>(0, j.size() - 1));
      switch (in.ConsumeIntegralInRange(0, 3)) {
        case 0: it.value() = Value(in); break;
        case 1: j.erase(it); break;
        case 2: j[in.ConsumeRandomLengthString(12)] = Value(in); break;
        default:
          if (depth < 3) Mutate(in, it.value(), depth + 1);
      }
    } else if (j.is_array() && !j.empty()) {
      const size_t i = in.ConsumeIntegralInRange<size_t>(0, j.size() - 1);
      if (in.ConsumeBool() && depth < 3) {
        Mutate(in, j[i], depth + 1);
      } else if (in.ConsumeBool()) {
        j.erase(i);
      } else {
        j[i] = Value(in);
      }
    } else {
      j = Value(in);
    }
  }
}

// Restores `state` into a fresh device from `make`; if taken, what it saves
// must be taken again.
template <typename Make, typename Save, typename Restore>
void Exercise(const json& state, Make make, Save save, Restore restore) {
  auto d = make();
  absl::Status s = restore(*d, state);
  if (!s.ok()) {
    DSEC_CHECK(s.code() == absl::StatusCode::kInvalidArgument ||
               s.code() == absl::StatusCode::kFailedPrecondition);
    return;
  }
  absl::StatusOr<json> again = save(*d);
  DSEC_CHECK(again.ok());
  auto e = make();
  DSEC_CHECK(restore(*e, *again).ok());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static NullSink sink;
  static auto irq = std::make_shared<dsec::devices::FakeInterruptLine>();
  static auto memory = dsec::memory::FakeGuestMemory::Create({{0, 1 << 20}}).value();
  static auto loop = dsec::EventLoop::Create().value();
  static dsec::devices::TestDevice::Listener listener;

  auto make_serial = [] { return std::make_unique<dsec::devices::SerialDevice>(&sink, irq.get()); };
  auto make_i8042 = [] { return std::make_unique<dsec::devices::I8042Device>([] {}); };
  auto make_acpi = [] { return std::make_unique<dsec::devices::AcpiPmDevice>(5, [] {}); };
  auto make_pit = [] { return dsec::devices::PitDevice::Create({}); };
  auto make_testdev = [] { return std::make_unique<dsec::devices::TestDevice>(*memory, &listener); };
  auto make_transport = [] {
    dsec::virtio::MmioTransport::Options o;
    o.name = "fuzz";
    o.device = std::make_shared<TwoQueues>();
    o.memory = memory.get();
    o.interrupt = irq;
    o.loop = loop.get();
    return dsec::virtio::MmioTransport::Create(std::move(o)).value();
  };
  auto save_plain = [](auto& d) -> absl::StatusOr<json> { return d.SaveState(); };
  auto restore_plain = [](auto& d, const json& j) { return d.RestoreState(j); };

  const int which = data[0] % 6;
  json state;
  if (data[1] & 1) {
    state = json::parse(std::string_view(reinterpret_cast<const char*>(data + 2), size - 2),
                        nullptr, false);
    if (state.is_discarded()) return 0;
  } else {
    FuzzedDataProvider in(data + 2, size - 2);
    switch (which) {
      case 0: state = make_serial()->SaveState(); break;
      case 1: state = make_i8042()->SaveState(); break;
      case 2: state = make_acpi()->SaveState(); break;
      case 3: state = make_pit()->SaveState(); break;
      case 4: state = make_testdev()->SaveState(); break;
      default: state = make_transport()->SaveState().value(); break;
    }
    Mutate(in, state);
  }
  switch (which) {
    case 0: Exercise(state, make_serial, save_plain, restore_plain); break;
    case 1: Exercise(state, make_i8042, save_plain, restore_plain); break;
    case 2: Exercise(state, make_acpi, save_plain, restore_plain); break;
    case 3: Exercise(state, make_pit, save_plain, restore_plain); break;
    case 4: Exercise(state, make_testdev, save_plain, restore_plain); break;
    default:
      Exercise(state, make_transport, [](auto& t) { return t.SaveState(); },
               [](auto& t, const json& j) { return t.RestoreState(j); });
      // A restored active transport posted a look at its queues: run it.
      (void)loop->RunOnce(0);
      break;
  }
  return 0;
}
