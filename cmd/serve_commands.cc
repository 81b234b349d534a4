// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm serve`: the node daemon is its own binary, dsec-vmmd, linked
// dynamically (cpp-httplib ships no static archive, and one long-lived
// process gains nothing from static linking, unlike the per-VM monitor).
// serve execs the dsec-vmmd next to /proc/self/exe with its arguments.
#include "cmd/serve_commands.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cmd/default_paths.h"

namespace dsec::cmd {

namespace {

int ExecDaemon(const std::vector<std::string>& args) {
  std::string exe = SelfExePath();
  auto slash = exe.rfind('/');
  std::string daemon = (slash == std::string::npos ? std::string(".") : exe.substr(0, slash)) + "/dsec-vmmd";
  if (::access(daemon.c_str(), X_OK) != 0) {
    fprintf(stderr,
            "dsec-vmm: serve needs the daemon binary %s, which is missing (%s); build the "
            "dsec-vmmd target next to dsec-vmm\n",
            daemon.c_str(), strerror(errno));
    return 2;
  }
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(daemon.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(daemon.c_str(), argv.data());
  fprintf(stderr, "dsec-vmm: exec %s: %s\n", daemon.c_str(), strerror(errno));
  return 125;
}

}  // namespace

void RegisterServeCommands(CLI::App& app, CommandRegistry& registry) {
  auto args = std::make_shared<std::vector<std::string>>();
  CLI::App* serve = app.add_subcommand(
      "serve", "Run the node daemon (REST API on a unix socket; see dsec-vmmd --help)");
  serve->prefix_command();  // everything after `serve` goes to dsec-vmmd as is
  serve->allow_extras();
  registry.Add(serve, [serve, args] {
    *args = serve->remaining();
    return ExecDaemon(*args);
  });
}

}  // namespace dsec::cmd
