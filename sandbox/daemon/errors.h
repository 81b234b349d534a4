// SPDX-License-Identifier: Apache-2.0
// The API's error model: absl::Status codes, the request field at fault
// (carried as a Status payload), and the one mapping to HTTP statuses and
// the contract's code names.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "base/json_fields.h"
#include "nlohmann/json.hpp"

namespace dsec::daemon {

// InvalidArgument naming the request field at fault, and the field an error
// names: base/json_fields.h (InvalidField, FieldOf).
// INVALID_ARGUMENT, NOT_FOUND, ... (the contract's names).
std::string ErrorCodeName(absl::StatusCode code);
int HttpStatusFor(absl::StatusCode code);
// `status` with every absolute path of two or more components in its
// message replaced by "<host path>" (same code, same field): for errors of
// host-side operations (cgroups, mounts, state directories), whose paths
// are the daemon's business, not the client's. The caller logs the
// original first.
absl::Status WithoutHostPaths(const absl::Status& status);
// The body of an error answer: {"error": {"code", "message"[, "field"]}}.
nlohmann::json ErrorJson(const absl::Status& status);

}  // namespace dsec::daemon
