// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm template ...`: the node's E2B templates (sandbox/e2b).
#pragma once

#include "CLI/CLI.hpp"
#include "cmd/command.h"

namespace dsec::cmd {

// Adds `template add|rm|ls`.
void RegisterTemplateCommands(CLI::App& app, CommandRegistry& registry);

}  // namespace dsec::cmd
