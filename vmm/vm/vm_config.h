// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dsec::vm {

enum class BootProtocolChoice { kAuto, kLinux64, kPvh };

struct ConsoleConfig {
  enum class Kind { kStdio, kFile, kNone };
  Kind kind = Kind::kStdio;
  std::string path;                       // for kFile
  uint64_t cap_bytes = 1 << 20;           // total bytes written; the rest is dropped and counted
  uint64_t rate_bytes_per_s = 256 << 10;  // sustained rate; bursts up to `burst_bytes`
  uint64_t burst_bytes = 64 << 10;
};

// Everything needed to build one microVM. Validated by Vm::Create.
struct VmConfig {
  std::string kernel_path;
  std::optional<std::string> initrd_path;
  std::string cmdline;
  uint64_t mem_mib = 128;
  uint32_t vcpus = 1;
  BootProtocolChoice boot = BootProtocolChoice::kAuto;
  ConsoleConfig console;
  // 0: no limit. When it expires the VM is stopped with StopReason::kTimeout.
  uint64_t timeout_ms = 0;
};

}  // namespace dsec::vm
