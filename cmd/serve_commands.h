// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "CLI/CLI.hpp"
#include "cmd/command.h"

namespace dsec::cmd {

// `dsec-vmm serve [ARGS]`: execs dsec-vmmd (the node daemon, a dynamically
// linked binary beside this one) with the same arguments.
void RegisterServeCommands(CLI::App& app, CommandRegistry& registry);

}  // namespace dsec::cmd
