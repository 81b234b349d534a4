// SPDX-License-Identifier: Apache-2.0
#include "devices/pmem/pmem_request.h"

#include <cstring>

#include "absl/status/status.h"

namespace dsec::devices {

absl::StatusOr<PmemRequest> ParsePmemRequest(const memory::GuestMemory& memory,
                                             const virtio::DescriptorChain& chain) {
  // Guest-controlled: the chain's shape and the type word (the queue checked
  // addresses and lengths; the bytes are copied out before use).
  if (chain.ReadableBytes() < sizeof(uint32_t)) {
    return absl::InvalidArgumentError("virtio-pmem: request shorter than struct virtio_pmem_req");
  }
  if (chain.WritableBytes() < sizeof(uint32_t)) {
    return absl::InvalidArgumentError("virtio-pmem: no room for struct virtio_pmem_resp");
  }
  virtio::ChainReader reader(memory, chain);
  absl::StatusOr<uint32_t> type = reader.ReadObj<uint32_t>();
  if (!type.ok()) return type.status();
  return PmemRequest{*type};  // x86 is little-endian, as le32 is
}

void ReadPmemConfig(uint64_t start, uint64_t size, uint64_t offset, std::span<uint8_t> data) {
  uint8_t config[kPmemConfigBytes];
  std::memcpy(config + kPmemConfigStartOffset, &start, sizeof(start));
  std::memcpy(config + kPmemConfigSizeOffset, &size, sizeof(size));
  for (size_t i = 0; i < data.size(); ++i) {
    // Guest-controlled: offset may be anything; bytes beyond the struct read 0.
    const uint64_t at = offset + i;
    data[i] = (at >= offset && at < kPmemConfigBytes) ? config[at] : 0;
  }
}

}  // namespace dsec::devices
