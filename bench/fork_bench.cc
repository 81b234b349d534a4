// SPDX-License-Identifier: Apache-2.0
#include "bench/fork_bench.h"

#include <string>
#include <vector>

#include "bench/daemon_script.h"

namespace dsec::bench {

int RunForkBench(const ForkBenchOptions& o) {
  DaemonScriptOptions d;
  d.bench = "fork";
  d.script = o.script;
  d.daemon_args = {"--max-sandboxes", std::to_string(2 * o.count + 8)};
  d.script_args = [o](const PrivateDaemon&) {
    std::vector<std::string> args = {"--count", std::to_string(o.count), "--runs", std::to_string(o.runs),
                                     "--change-kib", std::to_string(o.change_kib)};
    if (o.json) args.push_back("--json");
    return args;
  };
  return RunDaemonScript(d);
}

}  // namespace dsec::bench
