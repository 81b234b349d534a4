// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench net`.
#pragma once

#include "CLI/CLI.hpp"
#include "cmd/command.h"

namespace dsec::cmd {

// Adds `net` under the `bench` group.
void RegisterNetBenchCommands(CLI::App* bench, CommandRegistry& registry);

}  // namespace dsec::cmd
