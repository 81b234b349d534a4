// SPDX-License-Identifier: Apache-2.0
// A look at what a virtio-pmem backing file holds, to warn when the guest
// cannot use it with DAX. The one case checked: an EROFS image with
// compressed data. The guest kernel DAX-maps only uncompressed EROFS files
// (a compressed file is decompressed into the guest's own page cache), so
// such a layer still mounts but loses the point of pmem-dax: no sharing of
// the host page cache between microVMs, a guest page-cache copy per VM.
// Layers meant for microVMs are built uncompressed (`dsec-vmm layer build`
// default, `--compress none`; sandbox/layers/README.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dsec::devices {

// Empty when `head` (the first `len` bytes of the file) is not an EROFS image
// or is one without compressed data; otherwise why it is not DAX-capable.
// Reads the EROFS superblock (fs/erofs/erofs_fs.h: magic 0xE0F5E1E2 at byte
// 1024, feature_incompat at superblock offset 80): the incompat bits
// LZ4_0PADDING (0x1), COMPR_CFGS/BIG_PCLUSTER (0x2), ZTAILPACKING (0x10) and
// FRAGMENTS/DEDUPE (0x20) are set only by compressing mkfs runs.
std::string ErofsDaxIncompatibility(const uint8_t* head, size_t len);

// ErofsDaxIncompatibility of the file behind `fd` (pread of its first
// 1152 bytes; empty when they cannot be read).
std::string ErofsDaxIncompatibilityOfFile(int fd);

}  // namespace dsec::devices
