// SPDX-License-Identifier: Apache-2.0
// Pure parsing of virtio-blk requests (virtio 1.2 section 5.2.6): a validated
// DescriptorChain in, a BlkRequest out. No I/O and no ring access, so the
// parser can be unit-tested and fuzzed on its own.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "devices/virtio/descriptor_chain.h"
#include "platform/memory/guest_memory.h"

namespace dsec::devices {

inline constexpr uint64_t kBlkSectorSize = 512;
inline constexpr int kBlkSectorShift = 9;
// VIRTIO_BLK_ID_BYTES: the device ID string of a GET_ID request.
inline constexpr size_t kBlkIdBytes = 20;

// Request types (virtio 1.2 section 5.2.6, VIRTIO_BLK_T_*).
inline constexpr uint32_t kBlkTypeIn = 0;
inline constexpr uint32_t kBlkTypeOut = 1;
inline constexpr uint32_t kBlkTypeFlush = 4;
inline constexpr uint32_t kBlkTypeGetId = 8;
inline constexpr uint32_t kBlkTypeDiscard = 11;
inline constexpr uint32_t kBlkTypeWriteZeroes = 13;

// Status byte values (virtio 1.2 section 5.2.6, VIRTIO_BLK_S_*).
inline constexpr uint8_t kBlkStatusOk = 0;
inline constexpr uint8_t kBlkStatusIoErr = 1;
inline constexpr uint8_t kBlkStatusUnsupp = 2;

// Flags of a discard/write-zeroes segment (virtio 1.2 section 5.2.6).
inline constexpr uint32_t kBlkSegmentFlagUnmap = 1u << 0;

// struct virtio_blk_req up to the data (virtio 1.2 section 5.2.6). The spec
// calls the second field `reserved`; Linux puts the I/O priority there. All
// fields are little-endian, which is the host byte order on x86-64.
struct BlkRequestHeader {
  uint32_t type;
  uint32_t ioprio;
  uint64_t sector;
};
static_assert(sizeof(BlkRequestHeader) == 16);
static_assert(offsetof(BlkRequestHeader, sector) == 8);

// struct virtio_blk_discard_write_zeroes (virtio 1.2 section 5.2.6).
struct BlkSegmentWire {
  uint64_t sector;
  uint32_t num_sectors;
  uint32_t flags;
};
static_assert(sizeof(BlkSegmentWire) == 16);
static_assert(offsetof(BlkSegmentWire, flags) == 12);

enum class BlkRequestType { kIn, kOut, kFlush, kGetId, kDiscard, kWriteZeroes, kUnsupported };

// What the device offers and the driver negotiated; the parser checks every
// request against it.
struct BlkLimits {
  uint64_t capacity_sectors = 0;
  bool read_only = false;
  uint32_t seg_max = 1;  // data buffers per IN/OUT request
  bool discard = false;  // VIRTIO_BLK_F_DISCARD negotiated
  uint32_t max_discard_sectors = 0;
  uint32_t max_discard_seg = 0;
  bool write_zeroes = false;  // VIRTIO_BLK_F_WRITE_ZEROES negotiated
  uint32_t max_write_zeroes_sectors = 0;
  uint32_t max_write_zeroes_seg = 0;
};

// One discard/write-zeroes range, validated against the limits and capacity.
struct BlkSegment {
  uint64_t sector = 0;
  uint32_t num_sectors = 0;
  bool unmap = false;  // write zeroes only: the device may deallocate
};

// A parsed request. When `status` is not kBlkStatusOk the request is refused
// as it stands: the device writes `status` to `status_gpa` without any I/O.
struct BlkRequest {
  BlkRequestType type = BlkRequestType::kUnsupported;
  uint32_t raw_type = 0;
  uint8_t status = kBlkStatusOk;
  uint64_t sector = 0;
  // IN, GET_ID: device-writable data buffers; OUT: device-readable ones.
  std::vector<virtio::GuestBuffer> data;
  uint64_t data_len = 0;
  // DISCARD, WRITE_ZEROES.
  std::vector<BlkSegment> segments;
  // The status byte: the last byte of the device-writable part of the chain.
  uint64_t status_gpa = 0;

  // Byte offset of the I/O in the disk image (IN/OUT).
  uint64_t offset() const { return sector << kBlkSectorShift; }
};

// Parses one chain. Returns InvalidArgument only when no status byte can be
// written (no device-writable byte at all); every other malformed or refused
// request comes back with a non-OK `status` and its status byte location:
//  - header shorter than 16 bytes, data not a multiple of 512 bytes, a range
//    outside the capacity, more data buffers than seg_max, bad segment lists,
//    writes to a read-only device: VIRTIO_BLK_S_IOERR;
//  - unknown types, DISCARD / WRITE_ZEROES not negotiated, unknown segment
//    flags, unmap on a discard: VIRTIO_BLK_S_UNSUPP (section 5.2.6.2).
absl::StatusOr<BlkRequest> ParseBlkRequest(const memory::GuestMemory& memory,
                                           const virtio::DescriptorChain& chain,
                                           const BlkLimits& limits);

// Host iovecs for guest ranges, split where a range crosses from one memory
// region into the next. InvalidArgument if a range is not in guest RAM.
absl::StatusOr<std::vector<iovec>> GuestRangesToIovecs(const memory::GuestMemory& memory,
                                                       std::span<const virtio::GuestBuffer> ranges);

}  // namespace dsec::devices
