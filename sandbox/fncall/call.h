// SPDX-License-Identifier: Apache-2.0
// One fncall call: what the caller asks for and what it gets back.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dsec::fncall {

struct CallLimits {
  int64_t timeout_ms = 10000;             // wall clock; the call and all it spawned are killed
  uint64_t memory_bytes = 256ull << 20;   // the call's memory (the zygote's own is added)
  uint64_t pids = 64;                     // processes of the call (the zygote is not counted)
  uint64_t output_cap_bytes = 1 << 20;    // stdout + stderr; reaching it kills the call
  uint64_t output_rate_bytes_per_s = 0;   // token bucket over both; excess dropped, 0 = none
};

struct CallRequest {
  std::string code;               // Python source, or a bash script (bash -c CODE bash ARGS...)
  std::vector<std::string> args;  // sys.argv[1:] / $1...
  std::string stdin_data;
  std::vector<std::string> env;   // KEY=VALUE; empty = the pool's default environment
  std::string cwd = "/tmp";       // /tmp is a fresh, empty directory for every call
  // Unset fields take the pool's defaults.
  std::optional<int64_t> timeout_ms;
  std::optional<uint64_t> memory_bytes;
  std::optional<uint64_t> pids;
  std::optional<uint64_t> output_cap_bytes;
  std::optional<uint64_t> output_rate_bytes_per_s;
  // Optional: called with each piece of output the limiter admits (stream 1
  // = stdout, 2 = stderr), in order, as soon as the worker's read loop reads
  // it (dropped bytes never reach it). It runs on the calling thread inside
  // that loop, so the call's limits wait while it runs: it must return
  // promptly (buffer with a bound or drop; never block on a client).
  std::function<void(int stream, std::string_view bytes)> on_output;
};

// Which limit ended a call early (the call and everything it spawned were
// killed).
enum class KilledBy { kNone, kTimeout, kMemory, kOutputCap, kPids };
const char* KilledByName(KilledBy k);

struct CallResult {
  std::optional<int> exit_code;  // set if the call's process exited
  std::optional<int> signal;     // set if a signal killed it
  KilledBy killed_by = KilledBy::kNone;
  std::string stdout_data;
  std::string stderr_data;
  uint64_t output_dropped_bytes = 0;  // over the cap or the rate: read and discarded (both streams)
  uint64_t stdout_dropped = 0;        // the part of output_dropped_bytes read from stdout
  uint64_t stderr_dropped = 0;        // ... and from stderr
  int64_t wall_ns = 0;                // request sent to result complete
  uint64_t peak_rss_bytes = 0;        // the call's main process (rusage)
  // High-water mark of the worker's memory cgroup during the call, minus
  // what the zygote held when it started (nullopt where unknown, e.g. v2).
  std::optional<uint64_t> peak_memory_bytes;
  bool oom_killed = false;    // the OOM killer fired in the worker's cgroup
  bool pids_limited = false;  // a fork was refused by pids.max
  // Shell-style status: exit code, or 128 + signal.
  int status() const { return exit_code ? *exit_code : 128 + signal.value_or(0); }
};

}  // namespace dsec::fncall
