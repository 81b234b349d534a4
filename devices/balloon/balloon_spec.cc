// SPDX-License-Identifier: Apache-2.0
#include "devices/balloon/balloon_spec.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "devices/balloon/balloon_backend.h"
#include "devices/balloon/balloon_device.h"

namespace dsec::devices {

namespace {

constexpr uint64_t kMaxTargetMib = uint64_t{1} << 20;  // the monitor's RAM limit
constexpr uint64_t kPagesPerMib = (1u << 20) / 4096;

class BalloonKind final : public virtio::DeviceKind {
 public:
  std::string_view name() const override { return "balloon"; }
  std::span<const virtio::DeviceFlag> flags() const override { return kFlags; }
  // madvise (MADV_REMOVE on hugetlb-less RAM) is on every thread's list.
  virtio::HostCalls host_calls() const override { return {kCalls, {}}; }
  const std::type_info& control_type() const override { return typeid(BalloonControl); }
  absl::StatusOr<std::shared_ptr<const virtio::DeviceSpec>> FromJson(
      JsonFields& f) const override {
    auto spec = std::make_shared<BalloonSpec>();
    DSEC_ASSIGN_OR_RETURN(auto target, f.OptUint("target_mib", 0, kMaxTargetMib));
    spec->target_mib = target.value_or(0);
    return spec;
  }
  absl::StatusOr<virtio::DeviceSpecs> FromFlags(const virtio::DeviceFlagValues& values) const override {
    virtio::DeviceSpecs out;
    auto on = values.find("balloon");
    auto target = values.find("balloon-target-mib");
    const bool have_target = target != values.end() && !target->second.empty();
    if (on == values.end() || on->second.empty()) {
      if (have_target) return absl::InvalidArgumentError("--balloon-target-mib needs --balloon");
      return out;
    }
    auto spec = std::make_shared<BalloonSpec>();
    if (have_target) {
      const std::string& v = target->second.back();
      uint64_t mib = 0;
      if (!absl::SimpleAtoi(v, &mib) || mib > kMaxTargetMib) {
        return absl::InvalidArgumentError(
            absl::StrCat("--balloon-target-mib ", v, ": expected 0..", kMaxTargetMib));
      }
      spec->target_mib = mib;
    }
    out.push_back(std::move(spec));
    return out;
  }

 private:
  static constexpr virtio::DeviceFlag kFlags[] = {
      {"balloon", "", "Add a virtio-balloon device (inflated guest pages are released on the host)",
       false},
      {"balloon-target-mib", "MIB", "Initial balloon target in MiB (needs --balloon)", false}};
  static constexpr virtio::SyscallUse kCalls[] = {
      {virtio::HostThread::kEventLoop, "fallocate",
       "punching holes in guest RAM's memfd for inflated and reported pages"}};
};

}  // namespace

const virtio::DeviceKind& BalloonDeviceKind() {
  static const BalloonKind kind;
  return kind;
}

const virtio::DeviceKind& BalloonSpec::kind() const { return BalloonDeviceKind(); }

nlohmann::json BalloonSpec::ToJson() const { return {{"type", "balloon"}, {"target_mib", target_mib}}; }

absl::StatusOr<virtio::BuiltDevice> BalloonSpec::Build(const virtio::DeviceEnv& env) const {
  if (env.memory == nullptr) return absl::InvalidArgumentError("balloon: no guest memory");
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<MemfdBalloonBackend> backend,
                        MemfdBalloonBackend::ForGuestMemory(*env.memory));
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<BalloonDevice> balloon,
                        BalloonDevice::Create(std::move(backend), {}));
  const uint64_t target_pages = target_mib * kPagesPerMib;
  if (target_pages > balloon->ram_pages()) {
    return absl::InvalidArgumentError(
        absl::StrCat("balloon target_mib ", target_mib, " exceeds guest RAM"));
  }
  balloon->SetTargetPages(static_cast<uint32_t>(target_pages));
  virtio::BuiltDevice b;
  b.name = absl::StrCat("virtio-balloon", env.index);
  b.control = std::shared_ptr<BalloonControl>(balloon);
  b.device = std::move(balloon);
  return b;
}

}  // namespace dsec::devices
