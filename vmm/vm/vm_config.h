// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "devices/virtio/device_spec.h"
#include "sched/placement.h"

namespace dsec::vm {

enum class BootProtocolChoice { kAuto, kLinux64, kPvh };

// Where the 8254 PIT lives. kUser (default): devices/pit in the monitor,
// IRQ0 through an irqfd. kKernel: KVM's in-kernel PIT (KVM_CREATE_PIT2),
// whose teardown waits for two SRCU grace periods at VM exit (6-20 ms on
// PVM hosts; docs/benchmarks.md).
enum class PitChoice { kUser, kKernel };

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
  PitChoice pit = PitChoice::kUser;
  // ACPI tables and the PM1 registers (devices/acpi): how a Linux guest
  // powers off (exit "guest shut down"). Off: MP table only, as before.
  bool acpi = true;
  // CPU placement (sched/): latency-sensitive VMs get whole cores, best-effort
  // ones are packed elsewhere; every vCPU thread is pinned and isolated (core
  // scheduling cookie, or a cpuset cgroup where the kernel lacks it) before
  // its first KVM_RUN. Unset: no placement. A standalone monitor plans
  // against the whole host; the node daemon coordinates several VMs.
  std::optional<sched::QosClass> qos;
  ConsoleConfig console;
  // virtio-mmio devices (typed specs of the kinds in device_table.h),
  // announced on the kernel command line in this order: device i at
  // 0xd0000000 + i * 4 KiB, IRQ 5 + i.
  virtio::DeviceSpecs devices;
  // 0: no limit. When it expires the VM is stopped with StopReason::kTimeout.
  uint64_t timeout_ms = 0;
};

}  // namespace dsec::vm
