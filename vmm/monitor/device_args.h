// SPDX-License-Identifier: Apache-2.0
// Parsing of `vm run`'s device options into VmConfig pieces. Bad input is an
// InvalidArgument naming the option and the offending part.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "vmm/vm/vm_config.h"

namespace dsec::monitor {

// "PATH" or "PATH,ro".
absl::StatusOr<vm::DiskConfig> ParseDiskArg(const std::string& arg);
// "TAP" or "TAP,mac=02:00:00:00:00:01".
absl::StatusOr<vm::NetConfig> ParseNetArg(const std::string& arg);
// "CID,SOCKET" with CID >= 3.
absl::StatusOr<vm::VsockConfig> ParseVsockArg(const std::string& arg);

}  // namespace dsec::monitor
