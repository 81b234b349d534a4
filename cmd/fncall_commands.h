// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm sandbox run --tier fncall --lang python|bash -- CODE [ARGS]`:
// one call in a warm-pool worker (sandbox/fncall) on embedded defaults, over
// the fncall tier's default layers (layers::ResolveFncallLayers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>


namespace dsec::cmd {

struct FncallRunOptions {
  std::string lang = "python";      // python | bash
  std::vector<std::string> layers;  // image files or store references; none = defaults
  std::string store;                // layer store for references
  uint64_t memory_mib = 512;
  uint64_t pids = 512;
  int64_t timeout_s = 60;
  uint64_t output_cap_bytes = 16 << 20;
  uint64_t output_rate_bytes = 0;
  std::vector<std::string> env;  // KEY=VALUE added to the default environment
  std::string cwd = "/tmp";
  std::string log_level = "warn";
  std::vector<std::string> command;  // CODE [ARGS...]
};

// Runs one call, prints its output, returns its status (124 timeout or
// other limit, 125 runtime error).
int RunFncall(const FncallRunOptions& options);

}  // namespace dsec::cmd
