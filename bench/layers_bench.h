// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsec::bench {

struct LayersBenchOptions {
  bool json = false;
  // Where trees, images, archives and unpacked roots go. Must be a real
  // block-backed filesystem (not tmpfs), or bytes written read as zero.
  std::string work_dir = "/var/tmp";
  uint64_t total_mib = 160;  // generated content across the three layers
  uint64_t seed = 1;
  std::string mkfs = "mkfs.erofs";
  std::string tar = "tar";
  // Compressor of the compressed EROFS variant ("ALG[,LEVEL]"); empty:
  // PickBenchCompressor of what this mkfs.erofs offers.
  std::string compression;
};

// The compressor `bench layers` uses when none is given: the first of lz4,
// lz4hc, deflate, lzma that `available` holds, else the first available;
// empty when `available` is empty. lz4 first because building is part of
// what is measured: with erofs-utils 1.5 (Debian 12) lz4hc builds about 30x
// slower than lz4 for images about 10% smaller (measured on the bench's
// tree mix), and both decompress alike. `--compress lz4hc` measures it.
std::string PickBenchCompressor(const std::vector<std::string>& available);

// `dsec-vmm bench layers`: generates a base, toolkit and workspace tree
// (a few thousand files of mixed sizes, text-like and incompressible data),
// then, in three formats side by side: EROFS uncompressed (DAX-capable, what
// microVMs map through pmem-dax), EROFS compressed (options.compression;
// container tier only) and tar.gz,
//  1. full: builds all three as EROFS layers (digest + mkfs.erofs) and
//     mounts them as an overlay root, reading every file through it; builds
//     the same trees as tar.gz archives (tar czf) and extracts them into a
//     root directory;
//  2. rebuild: changes the toolkit tree, rebuilds that one layer in each
//     format and makes a fresh root again (EROFS: mount; tar.gz: extract all
//     three archives, since an extracted root cannot be patched by layer).
// JSON: erofs_s / erofs_write_mib (and speedup, write_ratio, rebuild_*) are
// the uncompressed variant; erofs_z_* (speedup_z, write_ratio_z,
// rebuild_erofs_z_*, ...) the compressed one, with "compression" naming it.
// Prints wall time and bytes written for each. Bytes written are the Linux
// task I/O accounting write_bytes (bytes dirtied for storage, counted when
// written, not when flushed) as /proc/self/io deltas around each step; the
// kernel folds a reaped child's accounting into its parent's, so mkfs.erofs,
// tar and the mount child are counted once. Writeback flushing is not timed
// on either side. Returns the exit status.
int RunLayersBench(const LayersBenchOptions& options);

}  // namespace dsec::bench
