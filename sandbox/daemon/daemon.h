// SPDX-License-Identifier: Apache-2.0
// The node daemon process (dsec-vmmd, `dsec-vmm serve`): start-up cleanup of
// what a previous run left, the trajectory store, the Service and the HTTP
// server, until SIGTERM/SIGINT.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sandbox/daemon/front_end.h"
#include "sandbox/daemon/http_server.h"
#include "sandbox/daemon/service.h"
#include "sandbox/tier/setup.h"
#include "sandbox/tier/tier.h"

namespace dsec::daemon {

// What the daemon itself is told; each tier's own options are its
// TierSetup's (node_tiers.h).
struct DaemonOptions {
  HttpOptions http;
  ServiceOptions service;
  std::string trajectory_dir = kDefaultTrajectoryDir;  // "" = no trajectory support
  uint64_t max_task_bytes = 64ull << 20;
  uint64_t max_node_bytes = 4ull << 30;
  // Place sandboxes created with a qos through sched/ (service.qos, when
  // not given, is made for the host at start).
  bool qos_placement = true;
  // Front ends the binary registered (dsec-vmmd: --e2b-listen).
  std::vector<FrontEndStarter> front_ends;
};

// Makes each tier from its setup (after the flags are parsed). A setup
// that answers Unavailable (a tier not built yet) goes into `unavailable`
// with its reason; any other error is returned.
absl::StatusOr<std::vector<std::unique_ptr<tier::Tier>>> MakeTiers(
    const std::vector<std::unique_ptr<tier::TierSetup>>& setups,
    std::map<std::string, std::string>* unavailable);
// Each tier's orphan cleanup (sandboxes and pools of dead owners under its
// state root: processes, mounts, cgroups), and what it found:
// {"<tier>_<orphans>": N, "<tier>_error": "..." when it failed}.
nlohmann::json CleanupPreviousRun(const std::vector<std::unique_ptr<tier::Tier>>& tiers);

// Runs the daemon with the given tiers until SIGTERM or SIGINT; returns
// the exit status. Blocks those signals in the calling thread first (call
// it before starting other threads).
int RunDaemon(DaemonOptions options, const std::vector<std::unique_ptr<tier::TierSetup>>& tiers);

}  // namespace dsec::daemon
