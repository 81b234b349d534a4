// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "CLI/CLI.hpp"
#include "cmd/command.h"

namespace dsec::cmd {

// Adds `pmem-density` under the `bench` subcommand (bench/pmem_density_bench.h).
void RegisterPmemBenchCommands(CLI::App* bench, CommandRegistry& registry);

}  // namespace dsec::cmd
