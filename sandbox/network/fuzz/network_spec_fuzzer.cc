// SPDX-License-Identifier: Apache-2.0
// A client's network request (create's "network", PATCH .../network): any
// JSON is either a spec or an InvalidArgument, never a crash.
#include <cstddef>
#include <cstdint>

#include "sandbox/network/policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  auto s = dsec::network::ParseNetworkSpec(j);
  if (s.ok()) (void)dsec::network::NetworkSpecJson(*s).dump();
  return 0;
}
