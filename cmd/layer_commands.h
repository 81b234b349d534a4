// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm layer ...` (the layer store) and `dsec-vmm bench layers`.
#pragma once

#include "CLI/CLI.hpp"
#include "cmd/command.h"

namespace dsec::cmd {

// Adds `layer build|ls|inspect|rm|gc`.
void RegisterLayerCommands(CLI::App& app, CommandRegistry& registry);
// Adds `layers` under the `bench` group.
void RegisterLayerBenchCommands(CLI::App* bench, CommandRegistry& registry);

}  // namespace dsec::cmd
