// SPDX-License-Identifier: Apache-2.0
// How a tier joins a node daemon: its traits, its own command-line flags
// and how to make it from them. Each tier's folder supplies one TierSetup;
// the daemon lists them, one registration line per tier
// (sandbox/daemon/node_tiers.cc).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sandbox/tier/tier.h"

namespace CLI {
class App;
}

namespace dsec::tier {

// Threads: the daemon's main thread, once: AddFlags, the flags are parsed,
// then Make.
class TierSetup {
 public:
  virtual ~TierSetup() = default;
  // The traits of the tier Make makes (the same object).
  virtual const TierTraits& traits() const = 0;
  // Adds the tier's flags to the daemon's command line (CLI11); they fill
  // this object's options. Flags are named --<tier>-... (the container
  // tier's --upper-mib predates the rule).
  virtual void AddFlags(CLI::App& app) = 0;
  // Makes the tier from its options, with the directories it needs.
  // Unavailable: this node cannot offer it (create answers 503 with the
  // message and health lists it); another error stops the daemon.
  virtual absl::StatusOr<std::unique_ptr<Tier>> Make() = 0;
};

// A tier the API knows that is not built yet: no flags, and Make answers
// Unavailable with `reason`.
std::unique_ptr<TierSetup> NotBuiltTier(std::string name, std::string reason);

}  // namespace dsec::tier
