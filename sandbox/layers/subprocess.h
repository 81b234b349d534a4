// SPDX-License-Identifier: Apache-2.0
// Runs a helper program (mkfs.erofs, tar) with posix_spawn and an argv, never
// through a shell, and reports how it ended.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::layers {

struct CommandResult {
  int exit_code = -1;     // valid when signal == 0
  int signal = 0;         // terminating signal, 0 if it exited
  std::string stderr_tail;  // last bytes of its stderr (bounded)
  // Bytes the child (and its waited-for descendants) caused to be written to
  // storage: wait4's ru_oublock, which Linux derives from the task I/O
  // accounting write_bytes (in 512-byte units).
  uint64_t write_bytes = 0;
  bool Succeeded() const { return signal == 0 && exit_code == 0; }
  // "exited 1: <stderr tail>" or "killed by signal 9".
  std::string Describe() const;
};

// Runs argv[0] (looked up in PATH) with `env` as its whole environment
// (PATH is added when absent), stdin and stdout on /dev/null, stderr captured.
// Blocks the calling thread until the child exits. Errors only when the child
// cannot be started; a non-zero exit is reported in the result.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& env = {});

// RunCommand, and an error (Internal, naming the program and its stderr)
// unless it exited with 0.
absl::StatusOr<CommandResult> RunCommandChecked(const std::vector<std::string>& argv,
                                                const std::vector<std::string>& env = {});

}  // namespace dsec::layers
