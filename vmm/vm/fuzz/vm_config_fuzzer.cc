// SPDX-License-Identifier: Apache-2.0
// Feeds configurations to the VmConfig parser (what `dsec-monitor --config
// FILE` and the microvm tier's config files go through, each device kind's
// JSON parser included): errors are InvalidArgument, and what parses
// round-trips (ToJson, parse again, the same JSON). Half the inputs are raw
// text; the other half build a config object from the bytes (keys, device
// types and values from the format and around it), so that a short run from
// an empty corpus reaches the device parsers.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "nlohmann/json.hpp"
#include "vmm/vm/device_table.h"
#include "vmm/vm/vm_config_json.h"

namespace {

// The input read as a sequence of choices (zeros once it is used up).
class Choices {
 public:
  Choices(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint64_t Word() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | Byte();
    return v;
  }
  std::string Text() {
    const size_t n = std::min<size_t>(Byte() % 32, size_ - std::min(pos_, size_));
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  template <size_t N>
  const char* Pick(const char* const (&words)[N]) {
    return words[Byte() % N];
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Words the format uses as values (enums, paths, tap names, MACs, CIDs).
constexpr const char* kWords[] = {
    "auto", "linux64", "pvh", "user", "kernel", "ls", "be", "stdio", "file", "none",
    "/k/vmlinux", "/i/root.erofs", "", "tap0", "a-tap-name-too-long", "02:00:00:aa:bb:cc",
    "01:00:00:aa:bb:cc", "zz:00", "/s/v.sock", "3"};

nlohmann::json Value(Choices& c) {
  switch (c.Byte() % 9) {
    case 0: return c.Byte();
    case 1: return static_cast<int64_t>(c.Word());
    case 2: return c.Word() >> (c.Byte() % 64);
    case 3: return static_cast<double>(c.Byte()) / 4;
    case 4: return c.Pick(kWords);
    case 5: return c.Text();
    case 6: return c.Byte() % 2 == 0;
    case 7: return nullptr;
    default: return c.Byte() % 2 == 0 ? nlohmann::json::array() : nlohmann::json::object();
  }
}

nlohmann::json Object(Choices& c, const char* const* keys, size_t n_keys, int max_fields) {
  nlohmann::json j = nlohmann::json::object();
  for (int n = c.Byte() % max_fields; n > 0; --n) {
    const uint8_t k = c.Byte();
    j[k % 16 == 15 ? c.Text() : std::string(keys[k % n_keys])] = Value(c);
  }
  return j;
}

nlohmann::json Device(Choices& c) {
  static const char* const kFields[] = {"path", "read_only", "target_mib", "guest_cid", "socket",
                                        "tap", "mac", "rate_bytes_per_s", "burst_bytes"};
  nlohmann::json d = Object(c, kFields, std::size(kFields), 5);
  const auto kinds = dsec::vm::DeviceKinds();
  const uint8_t t = c.Byte();
  if (t % 8 == 7) {
    d["type"] = Value(c);  // a type that is no kind, or not a string
  } else {
    d["type"] = std::string(kinds[t % kinds.size()]->name());
  }
  return d;
}

nlohmann::json Config(Choices& c) {
  static const char* const kKeys[] = {"kernel", "initrd", "cmdline", "mem_mib", "vcpus", "boot",
                                      "pit", "acpi", "qos", "timeout_ms"};
  static const char* const kConsole[] = {"kind", "path", "cap_bytes", "rate_bytes_per_s",
                                         "burst_bytes"};
  nlohmann::json j = Object(c, kKeys, std::size(kKeys), 8);
  if (c.Byte() % 2 == 0) j["console"] = Object(c, kConsole, std::size(kConsole), 5);
  if (c.Byte() % 4 != 0) {
    nlohmann::json devices = nlohmann::json::array();
    for (int n = c.Byte() % 5; n > 0; --n) devices.push_back(Device(c));
    j["devices"] = std::move(devices);
  }
  return j;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  nlohmann::json j;
  if (data[0] % 2 == 0) {
    Choices choices(data + 1, size - 1);
    j = Config(choices);
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
