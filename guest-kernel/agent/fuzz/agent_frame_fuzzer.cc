// SPDX-License-Identifier: Apache-2.0
// Drives the agent's FrameReader with arbitrary bytes, cut into pieces at
// input-chosen points, and decodes every frame it yields as the message its
// type announces (what both the agent and the host do with peer input).
// Run with the dictionary of JSON field names in this folder to get deep
// quickly: -dict=agent_frame_fuzzer.dict
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "guest-kernel/agent/messages.h"
#include "guest-kernel/agent/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // Second mode, for depth in the JSON decoders: byte 1 names a known type
  // and the rest is its payload.
  if ((data[0] & 0x80) != 0) {
    uint8_t type = data[1];
    if (!dsec::agent::IsKnownType(type)) return 0;
    dsec::agent::Frame f;
    f.type = static_cast<dsec::agent::MsgType>(type);
    f.payload.assign(reinterpret_cast<const char*>(data + 2), size - 2);
    (void)dsec::agent::ValidateFrame(f);
    return 0;
  }
  // First byte: the piece size (1..256) the stream is fed in.
  const size_t piece = static_cast<size_t>(data[0]) + 1;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  // A small limit as well as the real one, so the oversize path is reached.
  dsec::agent::FrameReader reader(data[0] & 1 ? dsec::agent::kMaxFramePayload : 4096);
  while (!rest.empty()) {
    size_t n = rest.size() < piece ? rest.size() : piece;
    reader.Append(rest.substr(0, n));
    rest.remove_prefix(n);
    for (;;) {
      auto next = reader.Next();
      if (!next.ok()) return 0;
      if (!next->has_value()) break;
      (void)dsec::agent::ValidateFrame(**next);
    }
  }
  return 0;
}
