// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "CLI/CLI.hpp"
#include "cmd/command.h"

namespace dsec::cmd {

// `dsec-vmm sandbox fork|snapshot|snapshots|snapshot-rm ...`: calls of the
// node daemon's API, made by dsec-vmmctl beside this binary (this one is
// static and has no HTTP client; sandbox/daemon/ctl_main.cc).
void RegisterSandboxApiCommands(CLI::App& app, CommandRegistry& registry);

}  // namespace dsec::cmd
