// SPDX-License-Identifier: Apache-2.0
#include "base/mmap.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace dsec {

absl::StatusOr<Mmap> Mmap::Anonymous(size_t size, int prot, int extra_flags) {
  if (size == 0) return absl::InvalidArgumentError("mmap: size is zero");
  void* p = ::mmap(nullptr, size, prot, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
  if (p == MAP_FAILED) return ErrnoToStatus(absl::StrCat("mmap(anonymous, ", size, ")"));
  return Mmap(p, size);
}

absl::StatusOr<Mmap> Mmap::File(int fd, size_t size, int prot, int flags, uint64_t offset) {
  if (size == 0) return absl::InvalidArgumentError("mmap: size is zero");
  void* p = ::mmap(nullptr, size, prot, flags, fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) return ErrnoToStatus(absl::StrCat("mmap(fd ", fd, ", ", size, ")"));
  return Mmap(p, size);
}

absl::Status Mmap::Advise(size_t offset, size_t length, int advice) const {
  if (offset > size_ || length > size_ - offset)
    return absl::InvalidArgumentError("madvise range outside mapping");
  if (::madvise(data() + offset, length, advice) != 0)
    return ErrnoToStatus(absl::StrCat("madvise(", advice, ")"));
  return absl::OkStatus();
}

void Mmap::Reset() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
  addr_ = nullptr;
  size_ = 0;
}

}  // namespace dsec
