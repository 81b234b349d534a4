// SPDX-License-Identifier: Apache-2.0
#include "sandbox/e2b/connect.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dsec::e2b {

using nlohmann::json;

absl::StatusOr<Envelope> ParseSingleEnvelope(absl::string_view body, size_t max_payload) {
  if (body.size() < kEnvelopeHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("connect envelope: ", body.size(), " bytes, shorter than its 5-byte header"));
  }
  const uint8_t flags = static_cast<uint8_t>(body[0]);
  if ((flags & kFlagCompressed) != 0) {
    return absl::UnimplementedError("connect envelope: compressed messages are not supported");
  }
  if ((flags & ~kFlagEndStream) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("connect envelope: unknown flags 0x", absl::Hex(flags)));
  }
  if ((flags & kFlagEndStream) != 0) {
    return absl::InvalidArgumentError("connect envelope: a request carries no end-of-stream envelope");
  }
  uint64_t length = 0;
  for (int i = 1; i <= 4; ++i) length = (length << 8) | static_cast<uint8_t>(body[i]);
  if (length > max_payload) {
    return absl::ResourceExhaustedError(
        absl::StrCat("connect envelope: message of ", length, " bytes over the limit of ", max_payload));
  }
  if (length != body.size() - kEnvelopeHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("connect envelope: declares ", length, " bytes, body holds ",
                                                   body.size() - kEnvelopeHeaderBytes));
  }
  return Envelope{flags, std::string(body.substr(kEnvelopeHeaderBytes))};
}

std::string EncodeEnvelope(uint8_t flags, absl::string_view payload) {
  std::string out;
  out.reserve(kEnvelopeHeaderBytes + payload.size());
  out.push_back(static_cast<char>(flags));
  const uint32_t n = static_cast<uint32_t>(payload.size());
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((n >> shift) & 0xff));
  out.append(payload.data(), payload.size());
  return out;
}

std::string MessageEnvelope(const json& message) {
  return EncodeEnvelope(0, message.dump(-1, ' ', false, json::error_handler_t::replace));
}

std::string EndStreamEnvelope(const absl::Status& status) {
  json end = json::object();
  if (!status.ok()) end["error"] = ConnectErrorJson(status);
  return EncodeEnvelope(kFlagEndStream, end.dump(-1, ' ', false, json::error_handler_t::replace));
}

std::string ConnectCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return "ok";
    case absl::StatusCode::kCancelled: return "canceled";
    case absl::StatusCode::kUnknown: return "unknown";
    case absl::StatusCode::kInvalidArgument: return "invalid_argument";
    case absl::StatusCode::kDeadlineExceeded: return "deadline_exceeded";
    case absl::StatusCode::kNotFound: return "not_found";
    case absl::StatusCode::kAlreadyExists: return "already_exists";
    case absl::StatusCode::kPermissionDenied: return "permission_denied";
    case absl::StatusCode::kResourceExhausted: return "resource_exhausted";
    case absl::StatusCode::kFailedPrecondition: return "failed_precondition";
    case absl::StatusCode::kAborted: return "aborted";
    case absl::StatusCode::kOutOfRange: return "out_of_range";
    case absl::StatusCode::kUnimplemented: return "unimplemented";
    case absl::StatusCode::kInternal: return "internal";
    case absl::StatusCode::kUnavailable: return "unavailable";
    case absl::StatusCode::kDataLoss: return "data_loss";
    case absl::StatusCode::kUnauthenticated: return "unauthenticated";
    default: return "unknown";
  }
}

// The protocol's table (Connect, "Error Codes").
int ConnectHttpStatus(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kCancelled: return 499;
    case absl::StatusCode::kInvalidArgument: return 400;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists: return 409;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kFailedPrecondition: return 400;
    case absl::StatusCode::kAborted: return 409;
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kUnauthenticated: return 401;
    default: return 500;
  }
}

json ConnectErrorJson(const absl::Status& status) {
  return json{{"code", ConnectCode(status.code())}, {"message", std::string(status.message())}};
}

absl::StatusOr<int64_t> ParseTimeoutMs(absl::string_view header) {
  if (header.empty()) return -1;
  if (header.size() > 10) return absl::InvalidArgumentError("Connect-Timeout-Ms: more than 10 digits");
  int64_t ms = 0;
  for (char c : header) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError("Connect-Timeout-Ms: not a decimal number");
    }
    ms = ms * 10 + (c - '0');
  }
  return ms;
}

absl::StatusOr<Method> ParseMethodPath(absl::string_view path) {
  if (path.empty() || path[0] != '/') return absl::InvalidArgumentError("method path must start with /");
  path.remove_prefix(1);
  const size_t slash = path.find('/');
  if (slash == absl::string_view::npos || slash == 0 || slash + 1 == path.size() ||
      path.find('/', slash + 1) != absl::string_view::npos) {
    return absl::InvalidArgumentError("method path must be /<package.Service>/<Method>");
  }
  return Method{std::string(path.substr(0, slash)), std::string(path.substr(slash + 1))};
}

}  // namespace dsec::e2b
