// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench api`.
#pragma once

#include "CLI/CLI.hpp"
#include "cmd/command.h"

namespace dsec::cmd {

// Adds `api` under the `bench` group: create + exec + delete through the
// Python SDK (libdsec) per tier, against a private daemon.
void RegisterApiBenchCommands(CLI::App* bench, CommandRegistry& registry);

}  // namespace dsec::cmd
