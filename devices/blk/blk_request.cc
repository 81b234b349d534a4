// SPDX-License-Identifier: Apache-2.0
#include "devices/blk/blk_request.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace dsec::devices {

namespace {

// True if [sector, sector + num_sectors) lies inside the disk, computed
// without overflow for any 64-bit guest values.
bool InCapacity(uint64_t sector, uint64_t num_sectors, uint64_t capacity_sectors) {
  return sector <= capacity_sectors && num_sectors <= capacity_sectors - sector;
}

BlkRequestType TypeOf(uint32_t raw_type) {
  switch (raw_type) {
    case kBlkTypeIn:
      return BlkRequestType::kIn;
    case kBlkTypeOut:
      return BlkRequestType::kOut;
    case kBlkTypeFlush:
      return BlkRequestType::kFlush;
    case kBlkTypeGetId:
      return BlkRequestType::kGetId;
    case kBlkTypeDiscard:
      return BlkRequestType::kDiscard;
    case kBlkTypeWriteZeroes:
      return BlkRequestType::kWriteZeroes;
    default:
      return BlkRequestType::kUnsupported;
  }
}

uint64_t SumLengths(const std::vector<virtio::GuestBuffer>& ranges) {
  uint64_t total = 0;
  for (const auto& r : ranges) total += r.len;
  return total;
}

// Checks an IN/OUT data area: whole sectors, within capacity, within seg_max.
uint8_t CheckData(const BlkRequest& req, const BlkLimits& limits) {
  // Guest-controlled: data_len is the sum of descriptor lengths (each below
  // 4 GiB, chain length capped by the queue), so it cannot overflow; sector
  // is any 64-bit value and is only used after InCapacity.
  if (req.data_len % kBlkSectorSize != 0) return kBlkStatusIoErr;
  if (req.data.size() > limits.seg_max) return kBlkStatusIoErr;
  if (!InCapacity(req.sector, req.data_len >> kBlkSectorShift, limits.capacity_sectors))
    return kBlkStatusIoErr;
  return kBlkStatusOk;
}

// Reads and validates the segment list of a DISCARD or WRITE_ZEROES request
// (virtio 1.2 section 5.2.6, struct virtio_blk_discard_write_zeroes).
uint8_t ParseSegments(virtio::ChainReader& reader, bool discard, const BlkLimits& limits,
                      std::vector<BlkSegment>& out) {
  const uint32_t max_seg = discard ? limits.max_discard_seg : limits.max_write_zeroes_seg;
  const uint32_t max_sectors =
      discard ? limits.max_discard_sectors : limits.max_write_zeroes_sectors;
  // Guest-controlled: the readable byte count; checked before anything is
  // allocated for it.
  const uint64_t bytes = reader.Remaining();
  if (bytes == 0 || bytes % sizeof(BlkSegmentWire) != 0) return kBlkStatusIoErr;
  const uint64_t count = bytes / sizeof(BlkSegmentWire);
  if (count > max_seg) return kBlkStatusIoErr;
  out.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    absl::StatusOr<BlkSegmentWire> wire = reader.ReadObj<BlkSegmentWire>();
    if (!wire.ok()) return kBlkStatusIoErr;
    // Guest-controlled: sector, num_sectors and flags, validated on this copy.
    // Section 5.2.6.2: unknown flags, and unmap on a discard, are UNSUPP.
    if ((wire->flags & ~kBlkSegmentFlagUnmap) != 0) return kBlkStatusUnsupp;
    const bool unmap = (wire->flags & kBlkSegmentFlagUnmap) != 0;
    if (discard && unmap) return kBlkStatusUnsupp;
    if (wire->num_sectors > max_sectors) return kBlkStatusIoErr;
    if (!InCapacity(wire->sector, wire->num_sectors, limits.capacity_sectors))
      return kBlkStatusIoErr;
    out.push_back(BlkSegment{wire->sector, wire->num_sectors, unmap});
  }
  return kBlkStatusOk;
}

}  // namespace

absl::StatusOr<BlkRequest> ParseBlkRequest(const memory::GuestMemory& memory,
                                           const virtio::DescriptorChain& chain,
                                           const BlkLimits& limits) {
  BlkRequest req;
  // Section 5.2.6: the status byte is the final byte of the device-writable
  // part. Without one there is no way to report anything to the driver.
  const uint64_t writable = chain.WritableBytes();
  if (writable == 0) {
    return absl::InvalidArgumentError("virtio-blk request has no device-writable status byte");
  }
  {
    virtio::ChainWriter locate(memory, chain);
    // Skipping all but one byte leaves exactly the status byte.
    if (!locate.Skip(writable - 1).ok()) {
      return absl::InvalidArgumentError("virtio-blk status byte not addressable");
    }
    std::vector<virtio::GuestBuffer> last = locate.TakeRanges(1);
    if (last.size() != 1 || last[0].len != 1) {
      return absl::InvalidArgumentError("virtio-blk status byte not addressable");
    }
    req.status_gpa = last[0].gpa;
  }

  virtio::ChainReader reader(memory, chain);
  absl::StatusOr<BlkRequestHeader> header = reader.ReadObj<BlkRequestHeader>();
  if (!header.ok()) {
    // Header shorter than 16 bytes or not in guest memory.
    req.status = kBlkStatusIoErr;
    return req;
  }
  // Guest-controlled: type and sector, copied out; validated below per type.
  req.raw_type = header->type;
  req.sector = header->sector;
  req.type = TypeOf(header->type);

  virtio::ChainWriter writer(memory, chain);
  const uint64_t data_writable = writable - 1;  // everything before the status byte
  switch (req.type) {
    case BlkRequestType::kIn:
      req.data = writer.TakeRanges(data_writable);
      req.data_len = SumLengths(req.data);
      req.status = CheckData(req, limits);
      break;
    case BlkRequestType::kOut:
      // Section 5.2.6.2: a read-only device fails writes with IOERR and
      // writes no data.
      if (limits.read_only) {
        req.status = kBlkStatusIoErr;
        break;
      }
      req.data = reader.TakeRanges(reader.Remaining());
      req.data_len = SumLengths(req.data);
      req.status = CheckData(req, limits);
      break;
    case BlkRequestType::kFlush:
      break;
    case BlkRequestType::kGetId:
      // The ID is up to 20 bytes; a smaller buffer gets a truncated ID.
      if (data_writable == 0) {
        req.status = kBlkStatusIoErr;
        break;
      }
      req.data = writer.TakeRanges(std::min<uint64_t>(data_writable, kBlkIdBytes));
      req.data_len = SumLengths(req.data);
      break;
    case BlkRequestType::kDiscard:
    case BlkRequestType::kWriteZeroes: {
      const bool discard = req.type == BlkRequestType::kDiscard;
      if (discard ? !limits.discard : !limits.write_zeroes) {
        req.status = kBlkStatusUnsupp;
        break;
      }
      if (limits.read_only) {
        req.status = kBlkStatusIoErr;
        break;
      }
      req.status = ParseSegments(reader, discard, limits, req.segments);
      break;
    }
    case BlkRequestType::kUnsupported:
      req.status = kBlkStatusUnsupp;
      break;
  }
  if (req.status != kBlkStatusOk) {
    req.data.clear();
    req.data_len = 0;
    req.segments.clear();
  }
  return req;
}

absl::StatusOr<std::vector<iovec>> GuestRangesToIovecs(
    const memory::GuestMemory& memory, std::span<const virtio::GuestBuffer> ranges) {
  std::vector<iovec> out;
  out.reserve(ranges.size());
  for (const virtio::GuestBuffer& range : ranges) {
    uint64_t gpa = range.gpa;
    uint64_t left = range.len;
    while (left > 0) {
      const memory::GuestRegion* region = memory.FindRegion(gpa);
      if (region == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrFormat("guest range 0x%x+%d is not in guest RAM", range.gpa, range.len));
      }
      const uint64_t here = std::min<uint64_t>(left, region->end() - gpa);
      out.push_back(iovec{region->host + (gpa - region->gpa), static_cast<size_t>(here)});
      gpa += here;
      left -= here;
    }
  }
  return out;
}

}  // namespace dsec::devices
