// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench snapshot`: microVM snapshots of the test guest (vmm/vm):
// snapshot time per GiB, restore p50/p99, restoring N clones, and host
// memory per idle clone (each a dsec-monitor process restored from one
// snapshot: what it costs beyond the page cache they share).
#pragma once

#include <string>

namespace dsec::bench {

struct SnapshotBenchOptions {
  bool json = false;
  int mem_mib = 256;    // guest RAM
  int touch_mib = 192;  // written by the guest before the snapshot
  int runs = 30;        // restores measured
  int clones = 8;       // clones restored together ("fork into N")
  std::string kernel;   // "" = the test guest beside the binary
  std::string monitor;  // "" = dsec-monitor beside the binary
  std::string dir;      // where snapshots go ("" = a temporary directory, removed)
  // "qemu": the same guest saved and restored by QEMU (microvm machine, KVM,
  // migration to a file) in the same run, and the ratios; "" = none.
  std::string peer;
  std::string qemu = "qemu-system-x86_64";
  int peer_runs = 10;
};

// 0 on success, 2 on bad options or a missing binary, 1 on a failure.
int RunSnapshotBench(const SnapshotBenchOptions& options);

}  // namespace dsec::bench
