// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "CLI/CLI.hpp"
#include "cmd/command.h"

namespace dsec::cmd {

// Adds `blk` and `vsock` under the `bench` subcommand (virtio device
// throughput against the same work done by the host; see bench/).
void RegisterVirtioBenchCommands(CLI::App* bench, CommandRegistry& registry);

}  // namespace dsec::cmd
