// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>

namespace dsec::bench {

struct PmemDensityOptions {
  int vms = 8;
  int image_mib = 256;
  bool json = false;
  std::string monitor;       // the monitor binary to spawn (dsec-monitor)
  std::string kernel;         // the test guest ELF
  std::string dir = "/var/tmp";  // where the image is created (a disk-backed fs)
  uint64_t timeout_ms = 600'000;  // per VM
};

// `dsec-vmm bench pmem-density`: memory density of pmem-DAX layers.
//
// Creates an image of `image_mib` MiB of pseudo-random words, and runs three
// rounds of `vms` test guests at once, each a `dsec-vmm vm run` process:
//   baseline  workload `boot`, no image: the VMs' private memory;
//   pmem      `--pmem IMAGE,ro`, workload `pmem-read` (DAX: reads every byte
//             of the window straight from the host page cache);
//   blk       `--disk IMAGE,ro`, workload `blk-read` (copies the whole image
//             into guest RAM, as a guest page cache would).
// Before each round the image's page cache is dropped (posix_fadvise
// DONTNEED, checked with mincore). Each round runs in its own memory cgroup
// (v1, uniquely named, removed afterwards); the round's peak is the
// cgroup's memory.max_usage_in_bytes, which counts the monitors' anonymous
// and memfd (guest RAM) pages and the page cache first read by them — the
// image's pages are charged once, to whichever VM touched them first.
// Every guest's checksum is checked against the host's. Prints the peaks,
// the reduction, and the median per-VM read time (guest CPL3 start ->
// workload done, from the monitors' timestamps). Returns the exit status.
int RunPmemDensityBench(const PmemDensityOptions& options);

}  // namespace dsec::bench
