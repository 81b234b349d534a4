// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>

namespace dsec::bench {

struct BlkBenchOptions {
  uint64_t mib = 512;        // bytes moved per mode, MiB
  int runs = 3;              // each figure is the median over this many runs
  uint64_t image_mib = 64;   // size of the temporary disk image
  bool json = false;
  std::string kernel;        // the test guest ELF
};

// `dsec-vmm bench blk`: creates a temporary raw image next to /tmp, boots
// the test guest once per mode (seqread, seqwrite: 64 KiB requests;
// randread, randwrite: 4 KiB requests) with `blk-bench:MODE,MiB` on an
// in-process vm::Vm, and then does the same requests (same sizes, offsets
// and count) from this process with buffered pread/pwrite on the same file.
// Prints MiB/s and IOPS of both and the ratio guest/host. Every run starts
// with the file written back and dropped from the page cache. Returns the
// process exit status.
int RunBlkBench(const BlkBenchOptions& options);

}  // namespace dsec::bench
