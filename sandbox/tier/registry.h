// SPDX-License-Identifier: Apache-2.0
// The tiers one node offers, fixed when the daemon starts, and the typed
// id that stands for "a tier" in the daemon's code (README.md: why an id
// from the registry, not a C++ enum).
#pragma once

#include <compare>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/tier/options.h"
#include "sandbox/tier/tier.h"

namespace dsec::tier {

// A registered tier. Only TierRegistry::Find makes one, so a TierId always
// names a tier of its registry (and is only used with that registry).
class TierId {
 public:
  size_t index() const { return index_; }
  friend auto operator<=>(const TierId&, const TierId&) = default;

 private:
  friend class TierRegistry;
  explicit TierId(size_t index) : index_(index) {}
  size_t index_;
};

// Threads: const after construction; every method from any thread.
class TierRegistry {
 public:
  // Each tier once, by its traits' name (DSEC_CHECKed, as is an option
  // declared twice by one tier). `unavailable`: tiers the API names that
  // this node does not offer (a known tier not built yet, or one that
  // could not start here), with why.
  TierRegistry(std::vector<std::unique_ptr<Tier>> tiers,
               std::map<std::string, std::string> unavailable);

  // The tier the API's name means: InvalidArgument naming the field "tier"
  // and the tiers offered for a name it does not know; Unavailable with
  // the reason for an unavailable one.
  absl::StatusOr<TierId> Find(std::string_view name) const;

  Tier& tier(TierId id) const { return *tiers_[id.index()]; }
  const TierTraits& traits(TierId id) const { return tiers_[id.index()]->traits(); }
  const std::string& name(TierId id) const { return tiers_[id.index()]->name(); }
  // Every registered tier, in registration order.
  std::vector<TierId> ids() const;
  const std::map<std::string, std::string>& unavailable() const { return unavailable_; }
  // The create options of every registered tier (the first declaration of
  // a name where tiers share one).
  const std::vector<OptionSpec>& known_options() const { return known_options_; }

  // A create request's tier fields (options.h) for a sandbox of `id`.
  absl::StatusOr<TierOptions> ParseOptions(TierId id, const nlohmann::json& fields) const;

 private:
  std::vector<std::unique_ptr<Tier>> tiers_;
  std::map<std::string, std::string> unavailable_;
  std::vector<OptionSpec> known_options_;
};

}  // namespace dsec::tier
