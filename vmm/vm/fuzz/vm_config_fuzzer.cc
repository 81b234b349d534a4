// SPDX-License-Identifier: Apache-2.0
// Feeds configurations to the VmConfig parser (what `dsec-monitor --config
// FILE` and the microvm tier's config files go through, each device kind's
// JSON parser included): errors are InvalidArgument, and what parses
// round-trips (ToJson, parse again, the same JSON). Half the inputs are raw
// text; the other half build a config object from the bytes (keys, device
// types and values from the format and around it), so that a short run from
// an empty corpus reaches the device parsers.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "fuzzer/FuzzedDataProvider.h"
#include "nlohmann/json.hpp"
#include "vmm/vm/device_table.h"
#include "vmm/vm/vm_config_json.h"

namespace {

// Words the format uses as values (enums, paths, tap names, MACs, CIDs).
constexpr const char* kWords[] = {
    "auto", "linux64", "pvh", "user", "kernel", "ls", "be", "stdio", "file", "none",
    "/k/vmlinux", "/i/root.erofs", "", "tap0", "a-tap-name-too-long", "02:00:00:aa:bb:cc",
    "01:00:00:aa:bb:cc", "zz:00", "/s/v.sock", "3"};

nlohmann::json Value(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 8)) {
    case 0: return in.ConsumeIntegral<uint8_t>();
    case 1: return in.ConsumeIntegral<int64_t>();
    case 2: return in.ConsumeIntegral<uint64_t>() >> in.ConsumeIntegralInRange(0, 63);
    case 3: return in.ConsumeFloatingPoint<double>();
    case 4: return in.PickValueInArray(kWords);
    case 5: return in.ConsumeRandomLengthString(32);
    case 6: return in.ConsumeBool();
    case 7: return nullptr;
    default: return in.ConsumeBool() ? nlohmann::json::array() : nlohmann::json::object();
  }
}

// An object with up to `max_fields` fields named from `keys` (1 in 16 some
// other name).
template <size_t N>
nlohmann::json Object(FuzzedDataProvider& in, const char* const (&keys)[N], int max_fields) {
  nlohmann::json j = nlohmann::json::object();
  for (int n = in.ConsumeIntegralInRange(0, max_fields); n > 0; --n) {
    std::string key = in.ConsumeIntegralInRange(0, 15) == 15 ? in.ConsumeRandomLengthString(16)
                                                             : in.PickValueInArray(keys);
    j[key] = Value(in);
  }
  return j;
}

nlohmann::json Device(FuzzedDataProvider& in) {
  static const char* const kFields[] = {"path", "read_only", "target_mib", "guest_cid", "socket",
                                        "tap", "mac", "rate_bytes_per_s", "burst_bytes"};
  nlohmann::json d = Object(in, kFields, 4);
  const auto kinds = dsec::vm::DeviceKinds();
  if (in.ConsumeIntegralInRange(0, 7) == 7) {
    d["type"] = Value(in);  // a type that is no kind, or not a string
  } else {
    d["type"] = std::string(kinds[in.ConsumeIntegralInRange<size_t>(0, kinds.size() - 1)]->name());
  }
  return d;
}

nlohmann::json Config(FuzzedDataProvider& in) {
  static const char* const kKeys[] = {"kernel", "initrd", "cmdline", "mem_mib", "vcpus", "boot",
                                      "pit", "acpi", "qos", "timeout_ms"};
  static const char* const kConsole[] = {"kind", "path", "cap_bytes", "rate_bytes_per_s",
                                         "burst_bytes"};
  nlohmann::json j = Object(in, kKeys, 7);
  if (in.ConsumeBool()) j["console"] = Object(in, kConsole, 4);
  if (in.ConsumeIntegralInRange(0, 3) != 0) {
    nlohmann::json devices = nlohmann::json::array();
    for (int n = in.ConsumeIntegralInRange(0, 4); n > 0; --n) devices.push_back(Device(in));
    j["devices"] = std::move(devices);
  }
  return j;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  nlohmann::json j;
  if (data[0] % 2 == 0) {
    FuzzedDataProvider in(data + 1, size - 1);
    j = Config(in);
  } else {
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return 0;
  }
  absl::StatusOr<dsec::vm::VmConfig> config = dsec::vm::VmConfigFromJson(j);
  if (!config.ok()) {
    DSEC_CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  const nlohmann::json once = dsec::vm::VmConfigToJson(*config);
  absl::StatusOr<dsec::vm::VmConfig> again = dsec::vm::VmConfigFromJson(once);
  DSEC_CHECK(again.ok());
  DSEC_CHECK(dsec::vm::VmConfigToJson(*again) == once);
  return 0;
}
