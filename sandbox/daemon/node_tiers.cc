// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/node_tiers.h"

#include "sandbox/container/container_tier.h"
#include "sandbox/fncall/fncall_tier.h"
#include "sandbox/microvm/microvm_tier.h"

namespace dsec::daemon {

std::vector<std::unique_ptr<tier::TierSetup>> NodeTiers() {
  std::vector<std::unique_ptr<tier::TierSetup>> tiers;
  tiers.push_back(std::make_unique<container::ContainerTierSetup>());
  tiers.push_back(std::make_unique<fncall::FncallTierSetup>());
  tiers.push_back(std::make_unique<microvm::MicrovmTierSetup>());
  tiers.push_back(tier::NotBuiltTier("fullvm", "the full-VM tier (libvirt/QEMU) is not built yet"));
  return tiers;
}

}  // namespace dsec::daemon
