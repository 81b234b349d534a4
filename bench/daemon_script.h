// SPDX-License-Identifier: Apache-2.0
// The benches that measure through the Python SDK (`bench api`,
// `bench density`): a private node daemon, a script of sdk/python/bench run
// against it, and everything gone afterwards.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace dsec::bench {

// What the script is told about the daemon it measures.
struct PrivateDaemon {
  std::string socket;               // the API's unix socket
  std::string work;                 // scratch directory of the script (layer trees)
  std::string container_state_dir;  // the container tier's state (sandboxes' records)
  pid_t pid = -1;                   // dsec-vmmd's
};

struct DaemonScriptOptions {
  // "api": `bench api` in messages and the temp directory's name; the
  // script is sdk/python/bench/api_bench.py, or $DSEC_API_BENCH_SCRIPT.
  std::string bench;
  std::string script;  // the script; "" = as `bench` says
  // dsec-vmmd options after the bench's own (socket, state, store, log).
  std::vector<std::string> daemon_args;
  // The script's options after --socket and --work.
  std::function<std::vector<std::string>(const PrivateDaemon&)> script_args;
};

// Starts a private node daemon (the dsec-vmmd beside this binary) on a temp
// socket with temp state, trajectory and layer-store directories (the
// script's fncall-layers directory under --work is a --layer-image-dir),
// runs the script with /usr/bin/python3 (PYTHONPATH: sdk/python), then
// stops the daemon (SIGTERM: it deletes what is left; SIGKILL after 60 s)
// and removes the temp directory; a mount left under it is an error and the
// directory is kept for inspection. SIGINT/SIGTERM while the script runs
// are passed on to it as SIGINT (it deletes what it made, then exits), a
// second one kills it; the daemon is then stopped the same way and the
// exit status is 130. Otherwise the script's exit status; 2 when the
// daemon, the script or python3 is missing. Called on the main thread,
// which it holds until all of it is over.
int RunDaemonScript(const DaemonScriptOptions& options);

}  // namespace dsec::bench
