// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench fncall`.
#pragma once

#include "CLI/CLI.hpp"
#include "cmd/command.h"

namespace dsec::cmd {

// Adds `fncall` under the `bench` group.
void RegisterFncallBenchCommands(CLI::App* bench, CommandRegistry& registry);

}  // namespace dsec::cmd
