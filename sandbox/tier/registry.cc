// SPDX-License-Identifier: Apache-2.0
#include "sandbox/tier/registry.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/json_fields.h"
#include "base/status.h"

namespace dsec::tier {

TierRegistry::TierRegistry(std::vector<std::unique_ptr<Tier>> tiers,
                           std::map<std::string, std::string> unavailable)
    : tiers_(std::move(tiers)), unavailable_(std::move(unavailable)) {
  std::set<std::string> names, options;
  for (const auto& t : tiers_) {
    DSEC_CHECK(names.insert(t->name()).second);  // one registration per tier
    DSEC_CHECK(unavailable_.count(t->name()) == 0);
    std::set<std::string> own;
    for (const OptionSpec& o : t->traits().options) {
      DSEC_CHECK(own.insert(o.name).second);
      if (options.insert(o.name).second) known_options_.push_back(o);
    }
  }
}

absl::StatusOr<TierId> TierRegistry::Find(std::string_view name) const {
  for (size_t i = 0; i < tiers_.size(); ++i) {
    if (tiers_[i]->name() == name) return TierId(i);
  }
  if (auto it = unavailable_.find(std::string(name)); it != unavailable_.end()) {
    return absl::UnavailableError(
        absl::StrCat("the ", std::string(name), " tier is not available on this node: ", it->second));
  }
  std::vector<std::string> offered;
  for (const auto& t : tiers_) offered.push_back(t->name());
  return InvalidField("tier", absl::StrCat("tier must be one of ", absl::StrJoin(offered, ", ")));
}

std::vector<TierId> TierRegistry::ids() const {
  std::vector<TierId> out;
  for (size_t i = 0; i < tiers_.size(); ++i) out.push_back(TierId(i));
  return out;
}

absl::StatusOr<TierOptions> TierRegistry::ParseOptions(TierId id, const nlohmann::json& fields) const {
  const TierTraits& t = traits(id);
  return ParseTierOptions(t.name, t.options, known_options_, fields);
}

}  // namespace dsec::tier
