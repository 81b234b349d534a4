// SPDX-License-Identifier: Apache-2.0
#include "devices/pmem/pmem_image_check.h"

#include <unistd.h>

#include "absl/strings/str_format.h"

namespace dsec::devices {
namespace {

constexpr size_t kSuperblockOffset = 1024;
constexpr size_t kSuperblockBytes = 128;
constexpr uint32_t kErofsMagic = 0xE0F5E1E2u;
constexpr uint32_t kCompressionIncompatBits = 0x1 | 0x2 | 0x10 | 0x20;

uint32_t Le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace

std::string ErofsDaxIncompatibility(const uint8_t* head, size_t len) {
  if (len < kSuperblockOffset + kSuperblockBytes) return {};
  const uint8_t* sb = head + kSuperblockOffset;
  if (Le32(sb) != kErofsMagic) return {};
  uint32_t incompat = Le32(sb + 80);
  if ((incompat & kCompressionIncompatBits) == 0) return {};
  return absl::StrFormat(
      "compressed EROFS image (superblock feature_incompat 0x%x): the guest cannot map its "
      "compressed files with DAX and reads them through its own page cache, so this layer is not "
      "shared between microVMs; rebuild it uncompressed (dsec-vmm layer build --compress none)",
      incompat);
}

std::string ErofsDaxIncompatibilityOfFile(int fd) {
  uint8_t head[kSuperblockOffset + kSuperblockBytes];
  ssize_t n = ::pread(fd, head, sizeof(head), 0);
  if (n <= 0) return {};
  return ErofsDaxIncompatibility(head, static_cast<size_t>(n));
}

}  // namespace dsec::devices
