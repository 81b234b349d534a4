// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm serve`: the node daemon is its own binary, dsec-vmmd, linked
// dynamically (cpp-httplib ships no static archive, and one long-lived
// process gains nothing from static linking, unlike the per-VM monitor).
// serve execs the dsec-vmmd next to /proc/self/exe with its arguments.
#include "cmd/serve_commands.h"

#include <memory>
#include <string>
#include <vector>

#include "cmd/exec_sibling.h"

namespace dsec::cmd {

void RegisterServeCommands(CLI::App& app, CommandRegistry& registry) {
  auto args = std::make_shared<std::vector<std::string>>();
  CLI::App* serve = app.add_subcommand(
      "serve", "Run the node daemon (REST API on a unix socket; see dsec-vmmd --help)");
  serve->prefix_command();  // everything after `serve` goes to dsec-vmmd as is
  serve->allow_extras();
  registry.Add(serve, [serve, args] {
    *args = serve->remaining();
    return ExecSibling("dsec-vmmd", *args);
  });
}

}  // namespace dsec::cmd
