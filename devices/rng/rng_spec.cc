// SPDX-License-Identifier: Apache-2.0
#include "devices/rng/rng_spec.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "devices/rng/rng_backend.h"
#include "devices/rng/rng_device.h"

namespace dsec::devices {

namespace {

class RngKind final : public virtio::DeviceKind {
 public:
  std::string_view name() const override { return "rng"; }
  std::span<const virtio::DeviceFlag> flags() const override { return kFlags; }
  // getrandom is on every thread's list.
  virtio::HostCalls host_calls() const override { return {}; }
  absl::StatusOr<std::shared_ptr<const virtio::DeviceSpec>> FromJson(
      JsonFields& f) const override {
    auto spec = std::make_shared<RngSpec>();
    DSEC_ASSIGN_OR_RETURN(auto rate, f.OptUint("rate_bytes_per_s", 0, uint64_t{1} << 40));
    DSEC_ASSIGN_OR_RETURN(auto burst, f.OptUint("burst_bytes", 0, uint64_t{1} << 40));
    spec->rate_bytes_per_sec = rate.value_or(0);
    spec->burst_bytes = burst.value_or(0);
    return spec;
  }
  absl::StatusOr<virtio::DeviceSpecs> FromFlags(const virtio::DeviceFlagValues& values) const override {
    virtio::DeviceSpecs out;
    if (auto it = values.find("rng"); it != values.end() && !it->second.empty()) {
      out.push_back(std::make_shared<RngSpec>());
    }
    return out;
  }

 private:
  static constexpr virtio::DeviceFlag kFlags[] = {
      {"rng", "", "Add a virtio-rng device (host getrandom)", false}};
};

}  // namespace

const virtio::DeviceKind& RngDeviceKind() {
  static const RngKind kind;
  return kind;
}

const virtio::DeviceKind& RngSpec::kind() const { return RngDeviceKind(); }

nlohmann::json RngSpec::ToJson() const {
  return {{"type", "rng"}, {"rate_bytes_per_s", rate_bytes_per_sec}, {"burst_bytes", burst_bytes}};
}

absl::StatusOr<virtio::BuiltDevice> RngSpec::Build(const virtio::DeviceEnv& env) const {
  RngOptions o;
  o.rate_bytes_per_sec = rate_bytes_per_sec;
  o.burst_bytes = burst_bytes;
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<RngDevice> rng,
                        RngDevice::Create(std::make_unique<GetrandomEntropySource>(), o));
  virtio::BuiltDevice b;
  b.name = absl::StrCat("virtio-rng", env.index);
  b.device = std::move(rng);
  return b;
}

}  // namespace dsec::devices
