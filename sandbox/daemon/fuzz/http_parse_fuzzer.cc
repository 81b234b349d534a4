// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: arbitrary bytes as a request head, a Range header and a
// JSON body through the HTTP layer's checks (http_parse.h). They must
// refuse with a Status and never crash, hang or throw; resolved ranges stay
// inside the representation and never overlap.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include "absl/strings/string_view.h"

#include "sandbox/daemon/http_parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  const size_t end = dsec::daemon::FindHeadEnd(text);
  if (end != absl::string_view::npos) (void)dsec::daemon::ParseRequestHead(text.substr(0, end));
  auto ranges = dsec::daemon::ResolveRanges(text, 4096);
  if (ranges.ok()) {
    uint64_t next = 0;
    for (const auto& r : *ranges) {
      if (r.length == 0 || r.offset < next || r.offset + r.length > 4096) abort();
      next = r.offset + r.length + 1;
    }
  }
  (void)dsec::daemon::ParseJsonBody(text, 1 << 20);
  return 0;
}
