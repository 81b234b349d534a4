// SPDX-License-Identifier: Apache-2.0
// A tier's own create options: the fields of a create request that only
// some tiers take (fncall's "lang", the container tier's "user_namespace").
// Each tier declares them in its traits (tier.h) and they are read here by
// one pure function, so that the daemon's request parser and CreateSpec
// stay the same whatever tiers a node offers. Fuzzed:
// fuzz/tier_options_fuzzer.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace dsec::tier {

// One sandbox's tier options: a JSON object, option name -> value, every
// value of its declared type.
using TierOptions = nlohmann::json;

struct OptionSpec {
  enum class Type { kString, kBool, kInt };
  std::string name;  // the create body's field
  Type type = Type::kString;
  // The value a sandbox gets without the field (of `type`); null: none,
  // the option stays unset.
  nlohmann::json default_value;
  // kString: the values it takes (empty: any string up to max_bytes).
  std::vector<std::string> choices;
  size_t max_bytes = 256;
  // kInt: the range it takes.
  int64_t min = 0;
  int64_t max = 0;
  // The value that means "not used" (user_namespace: false), which a
  // request for another tier may carry; null: the field is refused there
  // whatever its value.
  nlohmann::json neutral;
  // GET /v1/sandboxes/{id} shows it for every sandbox: its value, or
  // default_value where the sandbox's tier does not take it.
  bool shown = false;
};

// Reads `fields` (an object: the create body's fields beyond the common
// ones) for a sandbox of the tier `tier_name`, which takes the options
// `own`. `known` holds the options of every tier the node offers: a field
// another tier takes is refused ("the container tier takes no lang")
// unless null or its neutral value; any other field is unknown. Every
// error is an InvalidArgument naming the field. The result has every
// option of `own` that has a value or a default.
absl::StatusOr<TierOptions> ParseTierOptions(std::string_view tier_name,
                                             const std::vector<OptionSpec>& own,
                                             const std::vector<OptionSpec>& known,
                                             const nlohmann::json& fields);

// A sandbox's option, or `fallback` where it is unset or of another type
// (a CreateSpec made by hand in a test).
std::string OptionString(const TierOptions& options, std::string_view name,
                         std::string_view fallback = "");
bool OptionBool(const TierOptions& options, std::string_view name, bool fallback = false);
int64_t OptionInt(const TierOptions& options, std::string_view name, int64_t fallback = 0);

}  // namespace dsec::tier
