// SPDX-License-Identifier: Apache-2.0
// The tiers a node daemon offers: one registration line per tier.
#pragma once

#include <memory>
#include <vector>

#include "sandbox/tier/setup.h"

namespace dsec::daemon {

// Every tier of the API, in the order health, metrics and "tier must be
// one of" list them. Each setup adds its own flags to the daemon's command
// line; a tier not built yet answers 503 from its registration.
std::vector<std::unique_ptr<tier::TierSetup>> NodeTiers();

}  // namespace dsec::daemon
