// SPDX-License-Identifier: Apache-2.0
// The one decoder of the EROFS superblock (on-disk format,
// fs/erofs/erofs_fs.h: struct erofs_super_block at byte 1024, little
// endian), for the layer store (sandbox/layers: is this an image, is it
// compressed) and the pmem device (devices/pmem: can the guest map it with
// DAX).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec {

inline constexpr uint32_t kErofsMagic = 0xE0F5E1E2u;
inline constexpr size_t kErofsSuperblockOffset = 1024;
inline constexpr size_t kErofsSuperblockBytes = 128;
// What has to be read of an image to decode its superblock.
inline constexpr size_t kErofsHeadBytes = kErofsSuperblockOffset + kErofsSuperblockBytes;
// The incompat bits only compressing mkfs runs set: LZ4_0PADDING 0x1,
// COMPR_CFGS / BIG_PCLUSTER 0x2, ZTAILPACKING 0x10, FRAGMENTS / DEDUPE 0x20.
// (Chunked files 0x4 and a device table 0x8 do not mean compression.)
inline constexpr uint32_t kErofsIncompatCompressionMask = 0x1 | 0x2 | 0x10 | 0x20;

// What the superblock says about an image.
struct ErofsSuperblock {
  uint32_t feature_incompat = 0;  // at superblock offset 80
  uint8_t block_size_bits = 0;    // blkszbits, offset 12
  // The image may hold compressed files (a bit of the mask above is set).
  // The guest kernel does not DAX-map such files.
  bool compressed = false;
};

// Decodes the superblock from the first `len` bytes of an image (at least
// kErofsHeadBytes). InvalidArgument when too short or without the magic.
absl::StatusOr<ErofsSuperblock> DecodeErofsSuperblock(const uint8_t* head, size_t len);
// Reads (pread, the file offset is left alone) and decodes the superblock of
// the file behind `fd`; a read error is Internal, `what` names the file.
absl::StatusOr<ErofsSuperblock> ReadErofsSuperblock(int fd, const std::string& what);
// The same for the image at `path` (not following a final symlink); errors
// name the path.
absl::StatusOr<ErofsSuperblock> ReadErofsSuperblock(const std::string& path);

// The first kErofsHeadBytes of an image with this superblock (magic,
// blkszbits, feature_incompat; the rest zero): the inverse of the decoder,
// for tests of code that looks at images.
std::vector<uint8_t> EncodeErofsHead(uint32_t feature_incompat, uint8_t block_size_bits = 12);

}  // namespace dsec
