// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "CLI/CLI.hpp"
#include "cmd/command.h"

namespace dsec::cmd {

// Adds `container` under the `bench` subcommand (bench/container_bench.h).
void RegisterContainerBenchCommands(CLI::App* bench, CommandRegistry& registry);

}  // namespace dsec::cmd
