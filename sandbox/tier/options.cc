// SPDX-License-Identifier: Apache-2.0
#include "sandbox/tier/options.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "base/json_fields.h"
#include "base/status.h"

namespace dsec::tier {

namespace {

using nlohmann::json;

const OptionSpec* Find(const std::vector<OptionSpec>& specs, std::string_view name) {
  for (const OptionSpec& s : specs) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

// The option's value from the request (through `f`, which checks type and
// range), else its default; null when neither.
absl::StatusOr<json> ReadOption(JsonFields& f, const OptionSpec& spec) {
  switch (spec.type) {
    case OptionSpec::Type::kString: {
      std::optional<std::string> v;
      if (spec.choices.empty()) {
        DSEC_ASSIGN_OR_RETURN(v, f.OptString(spec.name, spec.max_bytes));
      } else {
        const std::vector<std::string_view> allowed(spec.choices.begin(), spec.choices.end());
        DSEC_ASSIGN_OR_RETURN(v, f.OptEnum(spec.name, allowed));
      }
      return v ? json(*v) : spec.default_value;
    }
    case OptionSpec::Type::kBool: {
      DSEC_ASSIGN_OR_RETURN(std::optional<bool> v, f.OptBool(spec.name));
      return v ? json(*v) : spec.default_value;
    }
    case OptionSpec::Type::kInt: {
      DSEC_ASSIGN_OR_RETURN(std::optional<int64_t> v, f.OptInt(spec.name, spec.min, spec.max));
      return v ? json(*v) : spec.default_value;
    }
  }
  return absl::InternalError("unhandled option type");
}

}  // namespace

absl::StatusOr<TierOptions> ParseTierOptions(std::string_view tier_name,
                                             const std::vector<OptionSpec>& own,
                                             const std::vector<OptionSpec>& known,
                                             const json& fields) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(fields));
  TierOptions out = json::object();
  for (const OptionSpec& spec : own) {
    DSEC_ASSIGN_OR_RETURN(json v, ReadOption(f, spec));
    if (!v.is_null()) out[spec.name] = std::move(v);
  }
  for (auto it = fields.begin(); it != fields.end(); ++it) {
    if (Find(own, it.key()) != nullptr) continue;
    const OptionSpec* other = Find(known, it.key());
    if (other == nullptr) continue;  // unknown: RejectUnknown names it
    if (!it->is_null() && (other->neutral.is_null() || *it != other->neutral)) {
      return InvalidField(it.key(), absl::StrCat("the ", std::string(tier_name), " tier takes no ", it.key()));
    }
    (void)f.Raw(it.key());  // "not used": accepted, ignored
  }
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  return out;
}

std::string OptionString(const TierOptions& options, std::string_view name, std::string_view fallback) {
  if (!options.is_object()) return std::string(fallback);
  auto it = options.find(name);
  return it != options.end() && it->is_string() ? it->get<std::string>() : std::string(fallback);
}

bool OptionBool(const TierOptions& options, std::string_view name, bool fallback) {
  if (!options.is_object()) return fallback;
  auto it = options.find(name);
  return it != options.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

int64_t OptionInt(const TierOptions& options, std::string_view name, int64_t fallback) {
  if (!options.is_object()) return fallback;
  auto it = options.find(name);
  return it != options.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

}  // namespace dsec::tier
