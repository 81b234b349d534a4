// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/errors.h"

#include <cstring>

namespace dsec::daemon {

std::string ErrorCodeName(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case absl::StatusCode::kNotFound: return "NOT_FOUND";
    case absl::StatusCode::kAlreadyExists: return "ALREADY_EXISTS";
    case absl::StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case absl::StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case absl::StatusCode::kUnavailable: return "UNAVAILABLE";
    case absl::StatusCode::kUnauthenticated: return "UNAUTHENTICATED";
    case absl::StatusCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    default: return "INTERNAL";
  }
}

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition: return 409;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

absl::Status WithoutHostPaths(const absl::Status& status) {
  if (status.ok()) return status;
  const absl::string_view msg = status.message();
  std::string out;
  bool changed = false;
  for (size_t i = 0; i < msg.size();) {
    // A path starts at '/' after a separator and runs to whitespace, a quote,
    // a bracket, ',' or ':'.
    const bool starts = msg[i] == '/' && (i == 0 || std::strchr(" \t\"'(=[<", msg[i - 1]) != nullptr);
    if (!starts) {
      out += msg[i++];
      continue;
    }
    size_t end = i;
    while (end < msg.size() && std::strchr(" \t\"'),:;]>", msg[end]) == nullptr) ++end;
    const absl::string_view path = msg.substr(i, end - i);
    if (path.find('/', 1) != absl::string_view::npos && path.find_first_not_of('/', 1) != absl::string_view::npos) {
      out += "<host path>";
      changed = true;
    } else {
      out.append(path.data(), path.size());
    }
    i = end;
  }
  if (!changed) return status;
  absl::Status s(status.code(), out);
  status.ForEachPayload([&s](absl::string_view url, const absl::Cord& payload) { s.SetPayload(url, payload); });
  return s;
}

nlohmann::json ErrorJson(const absl::Status& status) {
  nlohmann::json err = {{"code", ErrorCodeName(status.code())}, {"message", std::string(status.message())}};
  if (auto f = FieldOf(status)) err["field"] = *f;
  return nlohmann::json{{"error", err}};
}

}  // namespace dsec::daemon
