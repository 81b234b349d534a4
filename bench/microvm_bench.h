// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench microvm`: microVM sandboxes through the real launcher (a
// jailed dsec-monitor booting the guest kernel, dsec-agent as PID 1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sandbox/layers/layer_store.h"

namespace dsec::bench {

struct MicrovmBenchOptions {
  int runs = 20;
  int idle = 8;
  uint64_t mem_mib = 256;
  std::string kernel;
  std::string rootfs;
  std::vector<std::string> layers;  // images; default: base:bookworm from the store if present
  std::string store = layers::kDefaultStoreRoot;
  std::string state_root;
  bool json = false;
};

//  - create_exec_p50_ms / _p99_ms: create (spawn, boot, agent HELLO) to the
//    result of the first exec, over `runs` sandboxes made one at a time
//    (nearest-rank percentiles, bench/percentile.h, as every bench);
//  - idle_kib: host memory of one idle microVM that is not guest RAM: the
//    monitor's RSS minus the guest pages it has touched (control socket
//    `stats`: process.vm_rss - guest_resident_bytes), mean over `idle` VMs;
//  - idle_guest_kib: the guest RAM those idle VMs touched (mean);
//  - per_gib: idle microVMs per GiB of host memory, counting both.
// Where guest CPL0 code is emulated (PVM) nothing of this can run: the CPL0
// probe's reason is printed ({"skipped": reason} with json) and the exit
// status is 0. Returns the exit status.
int RunMicrovmBench(MicrovmBenchOptions options);

}  // namespace dsec::bench
