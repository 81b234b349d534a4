// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "CLI/CLI.hpp"
#include "cmd/command.h"

namespace dsec::cmd {

// `dsec-vmm sandbox run --tier container [--layers IMAGE|REF,...] [--store DIR] -- CMD ARGS`
// (no --layers: the default base:bookworm from the store, built on first use)
// and `dsec-vmm sandbox cleanup` (removes sandboxes of killed runtimes).
void RegisterContainerCommands(CLI::App& app, CommandRegistry& registry);

}  // namespace dsec::cmd
