// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "CLI/CLI.hpp"
#include "cmd/command.h"

namespace dsec::cmd {

// Adds `microvm` under the `bench` subcommand: create-to-first-exec-result
// latency of microVM sandboxes (p50/p99), memory per idle microVM and
// microVMs per GiB. Where the CPL0 probe finds guest kernel code emulated
// (PVM, HOST.md) it prints the reason and exits 0 ({"skipped": reason}).
void RegisterMicrovmBenchCommands(CLI::App* bench, CommandRegistry& registry);

}  // namespace dsec::cmd
