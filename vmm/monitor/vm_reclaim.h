// SPDX-License-Identifier: Apache-2.0
// `vm run`'s reclaim controller (balloon/) over the one VM of this process,
// and the answers of its control socket (cmd/vm_control.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "balloon/reclaim_controller.h"
#include "vmm/api/control.h"
#include "nlohmann/json.hpp"
#include "vmm/vm/vm.h"

namespace dsec::monitor {

enum class ReclaimMode { kOff, kBalloon, kPageout, kBoth };
absl::StatusOr<ReclaimMode> ParseReclaimMode(std::string_view name);
std::string_view ReclaimModeName(ReclaimMode mode);

struct ReclaimRunOptions {
  std::string mode = "off";
  balloon::ReclaimKnobs knobs;  // min_free_mib, aggressiveness, max_slowdown from flags
  int64_t interval_ms = 500;
  // DAMON's sysfs files are root's: a monitor that drops its uid uses the
  // pagemap sampler.
  bool try_damon = true;
};

// A ReclaimController over one Vm with its ReclaimThread.
// Threads: Start/Stop/destructor on the owner thread; MetricsJson and the
// controller from any thread (the control socket's).
// Lifetime: Stop() before Vm::Wait() (the controller posts to the device
// loop through the balloon); destroy before the Vm.
class VmReclaim {
 public:
  // InvalidArgument for balloon modes on a VM without a balloon device, or a
  // bad interval; the controller's errors otherwise.
  // `on_thread_start` runs first on the controller's thread (the jail).
  static absl::StatusOr<std::unique_ptr<VmReclaim>> Start(
      const vm::Vm& vm, const ReclaimRunOptions& options,
      std::function<absl::Status()> on_thread_start = {});
  ~VmReclaim();
  // Stops the periodic ticks (idempotent); metrics stay readable.
  void Stop();

  ReclaimMode mode() const { return mode_; }
  balloon::ReclaimController& controller() { return *controller_; }
  // {"mode","source","swap_available","knobs":{..},"vm":{per-VM metrics}}
  nlohmann::json MetricsJson() const;

 private:
  VmReclaim() = default;
  ReclaimMode mode_ = ReclaimMode::kOff;
  std::string source_why_;  // why DAMON was not used
  std::unique_ptr<balloon::ReclaimController> controller_;
  uint64_t id_ = 0;
  std::unique_ptr<balloon::ReclaimThread> thread_;
};

// The control socket's handler for one VM (`reclaim` may be null;
// `snapshot_dir_fd` is --snapshot-dir's directory, -1 without one).
absl::StatusOr<nlohmann::json> HandleVmControl(vm::Vm& vm, VmReclaim* reclaim,
                                               const api::ControlRequest& request,
                                               int snapshot_dir_fd = -1);

}  // namespace dsec::monitor
