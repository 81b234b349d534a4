// SPDX-License-Identifier: Apache-2.0
// The dsec-vmm binary: parses the command line and hands over to the
// subcommand a component registered. No feature logic lives here.
#include <cstdio>
#include <cstring>

#include "CLI/CLI.hpp"
#include "cmd/command.h"
#include "cmd/container_commands.h"
#include "cmd/layer_commands.h"
#include "cmd/sandbox_api_commands.h"
#include "cmd/serve_commands.h"
#include "cmd/template_commands.h"

int main(int argc, char** argv) {
  CLI::App app{"dsec-vmm: node-level sandbox runtime (microVM monitor, sandboxes, benchmarks)"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");

  dsec::cmd::CommandRegistry registry;
  dsec::cmd::RegisterVmCommands(app, registry);
  // One monitor process runs per microVM, so `dsec-vmm vm ...` builds only
  // its own command group: constructing every group's CLI11 options costs
  // about 1 MiB of resident memory and some start-up time in each monitor.
  // Any other first word (including --help) gets every group.
  const bool monitor_only = argc > 1 && std::strcmp(argv[1], "vm") == 0;
  if (!monitor_only) {
    dsec::cmd::RegisterBenchCommands(app, registry);
    dsec::cmd::RegisterLayerCommands(app, registry);
    dsec::cmd::RegisterContainerCommands(app, registry);
    dsec::cmd::RegisterServeCommands(app, registry);
    dsec::cmd::RegisterSandboxApiCommands(app, registry);
    dsec::cmd::RegisterTemplateCommands(app, registry);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors: one clear line (CLI11 prints it), exit status 2.
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return registry.RunSelected();
}
