// SPDX-License-Identifier: Apache-2.0
#include "bench/api_bench.h"

#include <string>
#include <vector>

#include "bench/daemon_script.h"

namespace dsec::bench {

int RunApiBench(const ApiBenchOptions& o) {
  DaemonScriptOptions d;
  d.bench = "api";
  d.script = o.script;
  d.script_args = [o](const PrivateDaemon&) {
    std::vector<std::string> args = {"--iterations", std::to_string(o.iterations),
                                     "--rate-seconds", std::to_string(o.rate_seconds),
                                     "--concurrency", std::to_string(o.concurrency)};
    if (o.json) args.push_back("--json");
    return args;
  };
  return RunDaemonScript(d);
}

}  // namespace dsec::bench
