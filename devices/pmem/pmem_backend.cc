// SPDX-License-Identifier: Apache-2.0
#include "devices/pmem/pmem_backend.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_format.h"
#include "devices/pmem/pmem_image_check.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::devices {

absl::StatusOr<std::unique_ptr<FilePmemBackend>> FilePmemBackend::Create(int fd,
                                                                         uint64_t expected_size) {
  ScopedFd dup(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!dup.valid()) return ErrnoStatus("fcntl(F_DUPFD_CLOEXEC)");
  // Once per layer at VM start: a compressed EROFS layer still works, but
  // without DAX (pmem_image_check.h), so say so rather than refuse.
  std::string no_dax = ErofsDaxIncompatibilityOfFile(dup.get());
  if (!no_dax.empty()) {
    char link[64];
    absl::SNPrintF(link, sizeof(link), "/proc/self/fd/%d", dup.get());
    char path[4096];
    ssize_t n = ::readlink(link, path, sizeof(path) - 1);
    DSEC_LOG(warn, "device=pmem image={} {}", n > 0 ? std::string(path, static_cast<size_t>(n)) : "?", no_dax);
  }
  return std::unique_ptr<FilePmemBackend>(new FilePmemBackend(std::move(dup), expected_size));
}

absl::Status FilePmemBackend::Flush() {
  while (::fdatasync(fd_.get()) != 0) {
    if (errno != EINTR) return ErrnoStatus("fdatasync");
  }
  return absl::OkStatus();
}

absl::Status FilePmemBackend::CheckSize() {
  struct stat st;
  if (::fstat(fd_.get(), &st) != 0) return ErrnoStatus("fstat");
  if (static_cast<uint64_t>(st.st_size) != expected_size_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "virtio-pmem: backing file changed size while mapped (%d -> %d bytes)", expected_size_,
        static_cast<uint64_t>(st.st_size)));
  }
  return absl::OkStatus();
}

}  // namespace dsec::devices
