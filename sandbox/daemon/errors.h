// SPDX-License-Identifier: Apache-2.0
// The API's error model: absl::Status codes, the request field at fault
// (carried as a Status payload), and the one mapping to HTTP statuses and
// the contract's code names.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "base/json_fields.h"

namespace dsec::daemon {

// InvalidArgument naming the request field at fault, and the field an error
// names: base/json_fields.h (InvalidField, FieldOf).
// INVALID_ARGUMENT, NOT_FOUND, ... (the contract's names).
std::string ErrorCodeName(absl::StatusCode code);
int HttpStatusFor(absl::StatusCode code);

}  // namespace dsec::daemon
