// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm sandbox run --tier fncall --lang python|bash -- CODE [ARGS]`:
// one call in a warm-pool worker (sandbox/fncall) on embedded defaults, and
// the default layers of the fncall tier.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

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

// The fncall tier's default layers for `lang`, lowest first: base:bookworm
// (built on first use by tools/build-base-layer.sh) and, for python, the
// python:1 toolkit layer (`build-base-layer.sh --toolkit python 1 python3`,
// also built on first use); progress goes to stderr. `layers` non-empty:
// those resolved instead (files or references).
absl::StatusOr<std::vector<std::string>> ResolveFncallLayers(const std::string& lang,
                                                             const std::vector<std::string>& layers,
                                                             const std::string& store);

}  // namespace dsec::cmd
