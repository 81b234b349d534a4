// SPDX-License-Identifier: Apache-2.0
#include "base/erofs_superblock.h"

#include <fcntl.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "base/little_endian.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec {

absl::StatusOr<ErofsSuperblock> DecodeErofsSuperblock(const uint8_t* head, size_t len) {
  if (len < kErofsHeadBytes) return absl::InvalidArgumentError("too short for an EROFS superblock");
  const uint8_t* sb = head + kErofsSuperblockOffset;
  if (LoadLe32(sb) != kErofsMagic) return absl::InvalidArgumentError("no EROFS superblock magic");
  ErofsSuperblock info;
  info.block_size_bits = sb[12];
  info.feature_incompat = LoadLe32(sb + 80);
  info.compressed = (info.feature_incompat & kErofsIncompatCompressionMask) != 0;
  return info;
}

absl::StatusOr<ErofsSuperblock> ReadErofsSuperblock(int fd, const std::string& what) {
  uint8_t head[kErofsHeadBytes];
  ssize_t n;
  do {
    n = ::pread(fd, head, sizeof(head), 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoStatus(absl::StrCat("pread ", what));
  auto info = DecodeErofsSuperblock(head, static_cast<size_t>(n));
  if (!info.ok()) return Annotate(info.status(), what);
  return info;
}

absl::StatusOr<ErofsSuperblock> ReadErofsSuperblock(const std::string& path) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(absl::StrCat("open ", path));
  return ReadErofsSuperblock(fd.get(), path);
}

std::vector<uint8_t> EncodeErofsHead(uint32_t feature_incompat, uint8_t block_size_bits) {
  std::vector<uint8_t> head(kErofsHeadBytes, 0);
  uint8_t* sb = head.data() + kErofsSuperblockOffset;
  StoreLe32(sb, kErofsMagic);
  sb[12] = block_size_bits;
  StoreLe32(sb + 80, feature_incompat);
  return head;
}

}  // namespace dsec
