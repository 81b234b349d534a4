// SPDX-License-Identifier: Apache-2.0
#include "devices/pmem/pmem_image_check.h"

#include "absl/strings/str_format.h"
#include "base/erofs_superblock.h"

namespace dsec::devices {
namespace {

std::string WhyNotDax(const absl::StatusOr<ErofsSuperblock>& sb) {
  // Not an EROFS image (or unreadable): nothing to say about DAX.
  if (!sb.ok() || !sb->compressed) return {};
  return absl::StrFormat(
      "compressed EROFS image (superblock feature_incompat 0x%x): the guest cannot map its "
      "compressed files with DAX and reads them through its own page cache, so this layer is not "
      "shared between microVMs; rebuild it uncompressed (dsec-vmm layer build --compress none)",
      sb->feature_incompat);
}

}  // namespace

std::string ErofsDaxIncompatibility(const uint8_t* head, size_t len) {
  return WhyNotDax(DecodeErofsSuperblock(head, len));
}

std::string ErofsDaxIncompatibilityOfFile(int fd) {
  return WhyNotDax(ReadErofsSuperblock(fd, "pmem backing file"));
}

}  // namespace dsec::devices
