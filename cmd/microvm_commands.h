// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm sandbox run --tier microvm -- CMD ARGS`: one microVM (the
// microvm tier's launcher: the guest kernel, the dsec-agent root image, the
// layers over virtio-pmem), one command through the agent, then the VM is
// destroyed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsec::cmd {

struct MicrovmRunOptions {
  std::vector<std::string> layers;  // image files or store references; none = base:bookworm
  std::string store;                // layer store for references
  uint64_t memory_mib = 512;
  double cpus = 0;
  int64_t timeout_s = 60;
  uint64_t output_cap_bytes = 16 << 20;
  uint64_t output_rate_bytes = 0;
  std::vector<std::string> env;  // KEY=VALUE
  std::string cwd;               // "" = the agent's default
  std::string kernel;            // "" = the default guest kernel
  std::string rootfs;            // "" = the default root image
  std::string state_dir;         // "" = the tier's default
  std::string log_level = "warn";
  std::vector<std::string> command;
};

// Runs the command, prints its output, returns its status (124 timeout,
// 125 runtime error, 2 bad input; 77 is never used: a host without the
// tier's needs is a runtime error that says why).
int RunMicrovm(const MicrovmRunOptions& options);

}  // namespace dsec::cmd
