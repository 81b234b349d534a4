// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: arbitrary bytes as a request body, through every
// request parser of the daemon, and as a file mode. They must refuse what
// they cannot use with a Status (naming a field) and never crash, hang or
// throw. The create body's tier fields go to the tiers' option parser,
// fuzzed on its own (sandbox/tier/fuzz/tier_options_fuzzer.cc).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "nlohmann/json.hpp"
#include "sandbox/daemon/requests.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)dsec::daemon::ParseFileMode(text);
  // The HTTP layer parses bodies the same way (no exceptions, depth as
  // nlohmann allows).
  nlohmann::json body = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  const dsec::daemon::RequestLimits limits;
  (void)dsec::daemon::ParseCreateRequest(body, limits);
  (void)dsec::daemon::ParseExecRequest(body, limits);
  (void)dsec::daemon::ParsePackDiffRequest(body);
  (void)dsec::daemon::ParseForkRequest(body, limits);
  (void)dsec::daemon::ParseAddLayerRequest(body);
  return 0;
}
