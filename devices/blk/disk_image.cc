// SPDX-License-Identifier: Apache-2.0
#include "devices/blk/disk_image.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::devices {

absl::StatusOr<DiskImage> DiskImage::Open(const std::string& path, bool read_only) {
  ScopedFd fd(::open(path.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(absl::StrCat("open disk image ", path));
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(absl::StrCat("fstat ", path));
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("disk image ", path, " is not a regular file or block device"));
  }
  // Advisory lock, taken by every dsec-vmm process that opens an image:
  // one writer, or any number of readers.
  if (::flock(fd.get(), (read_only ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat("disk image ", path, " is in use by another VM (flock)"));
    }
    return ErrnoStatus(absl::StrCat("flock ", path));
  }
  // lseek(SEEK_END) gives the size of block devices as well as files.
  const off_t end = ::lseek(fd.get(), 0, SEEK_END);
  if (end < 0) return ErrnoStatus(absl::StrCat("lseek ", path));
  const uint64_t size = static_cast<uint64_t>(end);
  if (size < 512) {
    return absl::InvalidArgumentError(absl::StrCat(
        "disk image ", path, " is too small: ", size, " bytes (at least one 512-byte sector)"));
  }
  if (size % 512 != 0) {
    DSEC_LOG(warn, "device=blk image={} size={} is not a multiple of 512; the last {} bytes are "
             "not visible to the guest", path, size, size % 512);
  }
  return DiskImage(std::move(fd), path, read_only, size);
}

}  // namespace dsec::devices
