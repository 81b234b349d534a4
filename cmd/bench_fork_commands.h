// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "CLI/CLI.hpp"
#include "cmd/command.h"

namespace dsec::cmd {

// `bench fork` (bench/fork_bench.h).
void RegisterForkBenchCommands(CLI::App* bench, CommandRegistry& registry);

}  // namespace dsec::cmd
