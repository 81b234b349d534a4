// SPDX-License-Identifier: Apache-2.0
#include "bench/density_bench.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "bench/daemon_script.h"

namespace dsec::bench {

int RunDensityBench(const DensityBenchOptions& o) {
  DaemonScriptOptions d;
  d.bench = "density";
  d.script = o.script;
  bool max_given = false;
  for (absl::string_view arg :
       absl::StrSplit(o.daemon_options, absl::ByAnyChar(" \t\n"), absl::SkipEmpty())) {
    max_given |= arg == "--max-sandboxes" || absl::StartsWith(arg, "--max-sandboxes=");
    d.daemon_args.emplace_back(arg);
  }
  // The probes create one more at N (each deletes its sandbox before the
  // next create).
  if (!max_given) {
    d.daemon_args.insert(d.daemon_args.begin(), {"--max-sandboxes", std::to_string(o.max + 1)});
  }
  d.script_args = [o](const PrivateDaemon& daemon) {
    std::vector<std::string> args = {"--tier", o.tier, "--max", std::to_string(o.max), "--sample",
                                     std::to_string(o.sample), "--delete-concurrency",
                                     std::to_string(o.delete_concurrency), "--daemon-pid",
                                     std::to_string(daemon.pid), "--container-state-dir",
                                     daemon.container_state_dir};
    if (!o.steps.empty()) args.insert(args.end(), {"--steps", o.steps});
    if (!o.ksm.empty()) args.insert(args.end(), {"--ksm", o.ksm});
    if (o.json) args.push_back("--json");
    return args;
  };
  return RunDaemonScript(d);
}

}  // namespace dsec::bench
