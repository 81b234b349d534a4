// SPDX-License-Identifier: Apache-2.0
#include "cmd/sandbox_api_commands.h"

#include <memory>
#include <string>
#include <vector>

#include "cmd/exec_sibling.h"

namespace dsec::cmd {

void RegisterSandboxApiCommands(CLI::App& app, CommandRegistry& registry) {
  CLI::App* group = nullptr;
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == "sandbox") group = sub;
  }
  if (group == nullptr) {
    group = app.add_subcommand("sandbox", "Sandboxes: run commands in a tier");
    group->require_subcommand(1);
  }
  struct Entry {
    const char* name;
    const char* help;
  };
  static constexpr Entry kCommands[] = {
      {"fork", "Through the node daemon: N sandboxes from a sandbox's files "
               "(ID [--count N] [--ttl-s S] [--socket P]; dsec-vmmctl fork --help)"},
      {"snapshot", "Through the node daemon: keep a sandbox's files as a snapshot (ID)"},
      {"snapshots", "Through the node daemon: list the node's snapshots"},
      {"snapshot-rm", "Through the node daemon: remove a snapshot (SNAPSHOT_ID)"},
  };
  for (const Entry& e : kCommands) {
    CLI::App* cmd = group->add_subcommand(e.name, e.help);
    cmd->prefix_command();  // everything after the name goes to dsec-vmmctl
    cmd->allow_extras();
    const std::string name = e.name;
    registry.Add(cmd, [cmd, name] {
      // dsec-vmmctl takes --socket/--url before the command: move them.
      std::vector<std::string> rest = cmd->remaining();
      std::vector<std::string> global, local;
      for (size_t i = 0; i < rest.size(); ++i) {
        const std::string& a = rest[i];
        const bool takes_value = a == "--socket" || a == "--url" || a == "--token-file";
        const bool joined = a.rfind("--socket=", 0) == 0 || a.rfind("--url=", 0) == 0 ||
                            a.rfind("--token-file=", 0) == 0;
        if (takes_value && i + 1 < rest.size()) {
          global.push_back(a);
          global.push_back(rest[++i]);
        } else if (joined) {
          global.push_back(a);
        } else {
          local.push_back(a);
        }
      }
      std::vector<std::string> args = global;
      args.push_back(name);
      args.insert(args.end(), local.begin(), local.end());
      return ExecSibling("dsec-vmmctl", args);
    });
  }
}

}  // namespace dsec::cmd
