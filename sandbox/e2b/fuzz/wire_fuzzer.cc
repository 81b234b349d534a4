// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: arbitrary bytes as a Connect request body (the
// envelope parser) and, parsed as JSON, as every E2B request document the
// server reads. They must refuse what they cannot use with a Status and
// never crash, hang or throw.
#include <cstddef>
#include <cstdint>

#include "nlohmann/json.hpp"
#include "sandbox/e2b/connect.h"
#include "sandbox/e2b/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  using namespace dsec::e2b;
  auto env = ParseSingleEnvelope(bytes, 1u << 20);
  (void)ParseTimeoutMs(bytes.substr(0, 16));
  (void)ParseMethodPath(bytes);
  (void)ParseTemplateFlag(bytes);
  // The envelope's message when there is one, else the whole input.
  const std::string text = env.ok() ? env->payload : std::string(bytes);
  nlohmann::json body = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  (void)ParseCreateRequest(body, 86400);
  (void)ParseSecondsField(body, "timeout", 86400);
  if (auto start = ParseStartRequest(body); start.ok()) (void)NodeExecBody(*start, {}, 1000, 3600);
  (void)ParseSelector(body);
  (void)ParseSignal(body);
  (void)ParsePathField(body, "path");
  (void)ParseWatchRequest(body);
  (void)ParseWatcherId(body);
  (void)ParseDepth(body, 16);
  (void)ParseTemplateFile(body);
  (void)ProcessEndOf(body);
  (void)DataEventOf(body);
  if (body.is_object()) (void)EntryInfoJson("/x", body.value("entry", nlohmann::json::object()));
  return 0;
}
