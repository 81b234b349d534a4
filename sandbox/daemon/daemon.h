// SPDX-License-Identifier: Apache-2.0
// The node daemon process (dsec-vmmd, `dsec-vmm serve`): start-up cleanup of
// what a previous run left, the trajectory store, the Service and the HTTP
// server, until SIGTERM/SIGINT.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "sandbox/daemon/http_server.h"
#include "sandbox/daemon/service.h"

namespace dsec::daemon {

struct DaemonOptions {
  HttpOptions http;
  ServiceOptions service;
  std::string container_state_root;  // container sandboxes' state dirs
  std::string fncall_state_root;     // fncall pools' state dirs
  uint64_t upper_size_bytes = 1ull << 30;
  size_t container_init_pool = 2;     // made-ahead container inits kept ready
  std::string trajectory_dir = kDefaultTrajectoryDir;  // "" = no trajectory support
  uint64_t max_task_bytes = 64ull << 20;
  uint64_t max_node_bytes = 4ull << 30;
  int fncall_max_workers = 8;
  int fncall_max_unused_pools = 4;  // FncallTierOptions::max_unused_pools
  // Place sandboxes created with a qos through sched/ (service.qos, when
  // not given, is made for the host at start).
  bool qos_placement = true;
  // microvm tier: state dirs ("" = /run/dsec-vmm/microvm), guest kernel and
  // root image ("" = under ${DSEC_CACHE_DIR:-$HOME/.cache/dsec-vmm}).
  std::string microvm_state_root;
  std::string microvm_kernel;
  std::string microvm_rootfs;
};

// The tiers this node offers, configured from the options.
std::vector<std::unique_ptr<Tier>> MakeTiers(const DaemonOptions& options);
// Each tier's orphan cleanup (sandboxes and pools of dead owners under its
// state root: processes, mounts, cgroups), and what it found:
// {"<tier>_<orphans>": N, "<tier>_error": "..." when it failed}.
nlohmann::json CleanupPreviousRun(const std::vector<std::unique_ptr<Tier>>& tiers);

// Runs the daemon until SIGTERM or SIGINT; returns the exit status.
// Blocks those signals in the calling thread first (call it before
// starting other threads).
int RunDaemon(DaemonOptions options);

}  // namespace dsec::daemon
