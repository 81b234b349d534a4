// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>

namespace dsec::bench {

struct VsockBenchOptions {
  uint64_t mib = 512;  // bytes moved each way, MiB
  int runs = 3;        // each figure is the median over this many runs
  bool json = false;
  std::string kernel;  // the test guest ELF
};

// `dsec-vmm bench vsock`: virtio-vsock throughput through the monitor's unix
// socket back-end, timed on the host, against a unix socket pair on the host
// moving the same bytes in the same run:
//  - guest -> host: the test guest's `vsock-send:PORT,BYTES` to a host
//    listener on `<socket>_PORT`; first to last byte received.
//  - host -> guest -> host: the test guest's `vsock-echo:PORT`; the host
//    writes the bytes while reading the echo; first write to last echoed
//    byte (a round trip: every byte crosses the device twice).
// Returns the process exit status.
int RunVsockBench(const VsockBenchOptions& options);

}  // namespace dsec::bench
