// SPDX-License-Identifier: Apache-2.0
// The Connect protocol's framing and error model, as E2B's SDKs speak it to
// envd (connectrpc.com/docs/protocol): pure functions, no I/O, fuzzed.
//
// A streaming call's body is a sequence of envelopes: one flag byte (bit 0
// compressed, bit 1 end of stream), a 4-byte big-endian length, then that
// many bytes of message (JSON here: application/connect+json). The server
// ends its stream with an end-of-stream envelope holding {} or
// {"error": {"code", "message"}}. A unary call is plain JSON both ways; its
// error is the HTTP status of the code with {"code", "message"} as body.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace dsec::e2b {

inline constexpr uint8_t kFlagCompressed = 0x01;
inline constexpr uint8_t kFlagEndStream = 0x02;
inline constexpr size_t kEnvelopeHeaderBytes = 5;

struct Envelope {
  uint8_t flags = 0;
  std::string payload;
};

// Exactly one envelope filling `body` (a server-streaming request), its
// message at most `max_payload` bytes. InvalidArgument for a short header,
// a length that disagrees with the body, trailing bytes or unknown flag
// bits; Unimplemented for a compressed one (no compression is offered);
// ResourceExhausted past `max_payload`.
absl::StatusOr<Envelope> ParseSingleEnvelope(absl::string_view body, size_t max_payload);

// One envelope around `payload`.
std::string EncodeEnvelope(uint8_t flags, absl::string_view payload);
// A message envelope with `message` as JSON.
std::string MessageEnvelope(const nlohmann::json& message);
// The end-of-stream envelope: {} for OK, else {"error": ...}.
std::string EndStreamEnvelope(const absl::Status& status);

// Connect's code names ("not_found", ...) and the HTTP status a unary
// error of that code answers with.
std::string ConnectCode(absl::StatusCode code);
int ConnectHttpStatus(absl::StatusCode code);
// {"code", "message"} of a unary error (also the "error" of an end-stream
// envelope).
nlohmann::json ConnectErrorJson(const absl::Status& status);

// The Connect-Timeout-Ms header: at most 10 ASCII digits (the protocol's
// limit). nullopt-equivalent -1 when absent; InvalidArgument when malformed.
absl::StatusOr<int64_t> ParseTimeoutMs(absl::string_view header);

// The method a Connect route names: "/process.Process/Start" ->
// {"process.Process", "Start"}; InvalidArgument for any other shape.
struct Method {
  std::string service;
  std::string name;
};
absl::StatusOr<Method> ParseMethodPath(absl::string_view path);

}  // namespace dsec::e2b
