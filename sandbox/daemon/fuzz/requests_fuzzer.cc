// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: arbitrary bytes as a request body, through every
// request parser of the daemon, the create body's tier fields through the
// option parser of every tier the node registers, and the bytes as a file
// mode. They must refuse what they cannot use with a Status (naming a
// field) and never crash, hang or throw.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <memory>
#include <vector>

#include "nlohmann/json.hpp"
#include "sandbox/daemon/node_tiers.h"
#include "sandbox/daemon/requests.h"
#include "sandbox/tier/options.h"

namespace {

struct Tiers {
  std::vector<std::unique_ptr<dsec::tier::TierSetup>> setups = dsec::daemon::NodeTiers();
  std::vector<dsec::tier::OptionSpec> known;
  Tiers() {
    for (const auto& s : setups) {
      for (const auto& o : s->traits().options) known.push_back(o);
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tiers tiers;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)dsec::daemon::ParseFileMode(text);
  // The HTTP layer parses bodies the same way (no exceptions, depth as
  // nlohmann allows).
  nlohmann::json body = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  const dsec::daemon::RequestLimits limits;
  auto create = dsec::daemon::ParseCreateRequest(body, limits);
  if (create.ok()) {
    for (const auto& s : tiers.setups) {
      const dsec::tier::TierTraits& t = s->traits();
      (void)dsec::tier::ParseTierOptions(t.name, t.options, tiers.known, create->tier_fields);
    }
  }
  (void)dsec::daemon::ParseExecRequest(body, limits);
  (void)dsec::daemon::ParsePackDiffRequest(body);
  (void)dsec::daemon::ParseAddLayerRequest(body);
  return 0;
}
