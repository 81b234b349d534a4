// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm vm run`: execs the monitor binary (dsec-monitor, beside this
// one) with the same arguments, so that one VM's process carries only the
// monitor's code; `vm ctl`: a client of a running monitor's control socket
// (vmm/api).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "cmd/command.h"
#include "cmd/exec_sibling.h"
#include "nlohmann/json.hpp"
#include "vmm/api/control.h"

namespace dsec::cmd {

namespace {

struct VmCtlOptions {
  std::string socket;
  uint64_t target_mib = 0;
  int timeout_ms = 5000;
};

// `vm ctl`: 0 when the VM answered ok, 1 for an error answer, 5 when the
// socket could not be reached or did not answer.
int RunVmCtl(const VmCtlOptions& opts, const nlohmann::json& request) {
  absl::StatusOr<nlohmann::json> resp = api::ControlCall(opts.socket, request, opts.timeout_ms);
  if (!resp.ok()) {
    std::fprintf(stderr, "dsec-vmm: %s\n", std::string(resp.status().message()).c_str());
    return 5;
  }
  std::printf("%s\n", resp->dump(2).c_str());
  return resp->value("ok", false) ? 0 : 1;
}

}  // namespace

void RegisterVmCommands(CLI::App& app, CommandRegistry& registry) {
  CLI::App* vm_cmd = app.add_subcommand("vm", "Run a single microVM (the monitor, dsec-monitor)");
  vm_cmd->require_subcommand(1);
  CLI::App* run = vm_cmd->add_subcommand(
      "run", "Boot a kernel and run until the guest stops (dsec-monitor --help lists the options)");
  run->prefix_command();  // everything after `run` goes to dsec-monitor as is
  run->allow_extras();
  run->set_help_flag();   // `vm run --help` reaches the monitor's own help
  registry.Add(run, [run] { return ExecSibling("dsec-monitor", run->remaining()); });

  CLI::App* ctl = vm_cmd->add_subcommand("ctl", "Talk to a running monitor's --control socket");
  ctl->require_subcommand(1);
  auto ctl_opts = std::make_shared<VmCtlOptions>();
  ctl->add_option("--socket", ctl_opts->socket, "The VM's control socket")->required();
  ctl->add_option("--timeout-ms", ctl_opts->timeout_ms, "Wait this long for the answer")
      ->capture_default_str()
      ->check(CLI::Range(1, 600'000));
  CLI::App* ctl_stats = ctl->add_subcommand(
      "stats", "Print balloon, guest statistics, reclaim metrics and monitor memory (JSON)");
  registry.Add(ctl_stats, [ctl_opts] { return RunVmCtl(*ctl_opts, nlohmann::json{{"op", "stats"}}); });
  CLI::App* ctl_balloon = ctl->add_subcommand("balloon", "Set the balloon target");
  ctl_balloon->add_option("--target-mib", ctl_opts->target_mib, "Balloon target in MiB")
      ->required()
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 20));
  registry.Add(ctl_balloon, [ctl_opts] {
    return RunVmCtl(*ctl_opts, nlohmann::json{{"op", "balloon"}, {"target_mib", ctl_opts->target_mib}});
  });
  CLI::App* ctl_snapshot = ctl->add_subcommand(
      "snapshot",
      "Write a snapshot of the VM into the monitor's --snapshot-dir (pausing it meanwhile)");
  auto diff = std::make_shared<bool>(false);
  ctl_snapshot->add_flag("--diff", *diff,
                         "Only the pages changed since the VM was restored (a diff on the "
                         "snapshot it was restored from)");
  registry.Add(ctl_snapshot, [ctl_opts, diff] {
    nlohmann::json req{{"op", "snapshot"}};
    if (*diff) req["diff"] = true;
    return RunVmCtl(*ctl_opts, req);
  });
  CLI::App* ctl_pause = ctl->add_subcommand("pause", "Stop every vCPU (the guest's clock runs on)");
  registry.Add(ctl_pause, [ctl_opts] { return RunVmCtl(*ctl_opts, nlohmann::json{{"op", "pause"}}); });
  CLI::App* ctl_resume = ctl->add_subcommand("resume", "Restart the vCPUs of a paused VM");
  registry.Add(ctl_resume, [ctl_opts] { return RunVmCtl(*ctl_opts, nlohmann::json{{"op", "resume"}}); });
}

}  // namespace dsec::cmd
