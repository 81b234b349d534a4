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
// The superblock is decoded by base/erofs_superblock.h (compressed: one of
// the incompat bits only compressing mkfs runs set).
std::string ErofsDaxIncompatibility(const uint8_t* head, size_t len);

// ErofsDaxIncompatibility of the file behind `fd` (pread of its first
// 1152 bytes; empty when they cannot be read).
std::string ErofsDaxIncompatibilityOfFile(int fd);

}  // namespace dsec::devices
