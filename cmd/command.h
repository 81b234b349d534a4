// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <functional>
#include <vector>

#include "CLI/CLI.hpp"

namespace dsec::cmd {

// Each command group registers its CLI11 subcommands together with the
// function to run when one is selected. main() calls each group's Register
// function explicitly: adding a group touches main.cc and its own file only.
class CommandRegistry {
 public:
  void Add(CLI::App* subcommand, std::function<int()> run) {
    entries_.push_back({subcommand, std::move(run)});
  }
  // Runs the (innermost) selected subcommand; returns its exit status.
  int RunSelected() const {
    for (const auto& e : entries_) {
      if (e.app->parsed()) return e.run();
    }
    return 2;
  }

 private:
  struct Entry {
    CLI::App* app;
    std::function<int()> run;
  };
  std::vector<Entry> entries_;
};

void RegisterVmCommands(CLI::App& app, CommandRegistry& registry);
void RegisterBenchCommands(CLI::App& app, CommandRegistry& registry);

}  // namespace dsec::cmd
