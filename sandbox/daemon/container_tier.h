// SPDX-License-Identifier: Apache-2.0
// The container tier behind the daemon's Tier interface: container::Sandbox
// for create/exec/destroy, the cgroup freezer (v1 freezer hierarchy, v2
// cgroup.freeze) for pause/resume, openat2-confined file access through
// the merged root, and the upper directory for pack_diff.
#pragma once

#include <memory>
#include <string>

#include "sandbox/daemon/tier.h"

namespace dsec::daemon {

struct ContainerTierOptions {
  std::string state_root;           // container::SandboxConfig::state_root
  uint64_t upper_size_bytes = 1ull << 30;
};

class ContainerTier : public Tier {
 public:
  explicit ContainerTier(ContainerTierOptions options) : options_(std::move(options)) {}
  std::string name() const override { return "container"; }
  absl::StatusOr<std::unique_ptr<TierSandbox>> Create(const CreateSpec& spec) override;
  // Thaws freezer cgroups of orphans (a frozen process cannot die), then
  // container::CleanupOrphans.
  absl::StatusOr<int> CleanupOrphans() override;

 private:
  ContainerTierOptions options_;
};

// Freezer cgroup name of a sandbox (v1 hierarchy or hybrid v2).
std::string FreezerCgroupName(const std::string& sandbox_id);

}  // namespace dsec::daemon
