// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench density`.
#pragma once

#include "CLI/CLI.hpp"
#include "cmd/command.h"

namespace dsec::cmd {

// Adds `density` under the `bench` group: idle sandboxes of one tier ramped
// through the API of a private daemon, with latency and memory per step.
void RegisterDensityBenchCommands(CLI::App* bench, CommandRegistry& registry);

}  // namespace dsec::cmd
