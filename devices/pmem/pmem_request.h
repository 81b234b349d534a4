// SPDX-License-Identifier: Apache-2.0
// Pure parsing of virtio-pmem requests and the device configuration space
// (virtio 1.2 section 5.19): no I/O, no ring access, fuzzable.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "devices/virtio/descriptor_chain.h"
#include "platform/memory/guest_memory.h"

namespace dsec::devices {

// Section 5.19.6: the only request type.
inline constexpr uint32_t kPmemReqTypeFlush = 0;  // VIRTIO_PMEM_REQ_TYPE_FLUSH
// Section 5.19.6: resp.ret is 0 on success; Linux's driver maps any other
// value to -EIO.
inline constexpr uint32_t kPmemRespOk = 0;
inline constexpr uint32_t kPmemRespError = 1;

// Section 5.19.4: struct virtio_pmem_config { le64 start; le64 size; }.
inline constexpr uint64_t kPmemConfigStartOffset = 0;
inline constexpr uint64_t kPmemConfigSizeOffset = 8;
inline constexpr uint64_t kPmemConfigBytes = 16;

struct PmemRequest {
  uint32_t type = 0;
};

// Section 5.19.6: a request is a device-readable struct virtio_pmem_req
// { le32 type; } followed by a device-writable struct virtio_pmem_resp
// { le32 ret; }. InvalidArgument when either part is shorter than 4 bytes;
// such a chain is completed with length 0 (there is nowhere to put a status).
// An unknown type parses fine: the device answers it with kPmemRespError.
absl::StatusOr<PmemRequest> ParsePmemRequest(const memory::GuestMemory& memory,
                                             const virtio::DescriptorChain& chain);

// Fills `data` with the config space bytes at `offset` (little-endian,
// zeros beyond the struct). Guest-controlled: offset and data.size().
void ReadPmemConfig(uint64_t start, uint64_t size, uint64_t offset, std::span<uint8_t> data);

}  // namespace dsec::devices
