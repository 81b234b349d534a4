// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: arbitrary bytes as the tier fields of a create request,
// read for tiers declaring every kind of option (a string choice, a free
// string, a bool with a neutral value, an integer range). The parser must
// refuse what it cannot use with a Status naming a field and never crash,
// hang or throw.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "sandbox/tier/options.h"

namespace {

std::vector<dsec::tier::OptionSpec> Specs() {
  using dsec::tier::OptionSpec;
  OptionSpec lang{.name = "lang", .default_value = "python", .choices = {"python", "bash"}};
  OptionSpec label{.name = "label", .max_bytes = 16};
  OptionSpec userns{.name = "user_namespace", .type = OptionSpec::Type::kBool,
                    .default_value = false, .neutral = false, .shown = true};
  OptionSpec disk{.name = "disk_gib", .type = OptionSpec::Type::kInt, .min = 1, .max = 64};
  return {lang, label, userns, disk};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<dsec::tier::OptionSpec> known = Specs();
  static const std::vector<dsec::tier::OptionSpec> first_two(known.begin(), known.begin() + 2);
  static const std::vector<dsec::tier::OptionSpec> last_two(known.begin() + 2, known.end());
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json fields = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (fields.is_discarded()) return 0;
  for (const auto* own : {&known, &first_two, &last_two}) {
    auto o = dsec::tier::ParseTierOptions("fuzz", *own, known, fields);
    if (o.ok()) {
      (void)dsec::tier::OptionString(*o, "lang");
      (void)dsec::tier::OptionBool(*o, "user_namespace");
      (void)dsec::tier::OptionInt(*o, "disk_gib");
    }
  }
  return 0;
}
