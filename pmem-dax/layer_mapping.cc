// SPDX-License-Identifier: Apache-2.0
#include "pmem-dax/layer_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"

namespace dsec::pmem {

namespace {
constexpr uint64_t kPage = 4096;
}  // namespace

absl::StatusOr<uint64_t> PmemRegionSize(uint64_t file_size) {
  if (file_size == 0) return absl::InvalidArgumentError("layer image is empty");
  if (file_size > UINT64_MAX - kPmemAlignment) {
    return absl::InvalidArgumentError("layer image is too large");
  }
  return (file_size + kPmemAlignment - 1) & ~(kPmemAlignment - 1);
}

absl::StatusOr<LayerMapping> LayerMapping::Create(const std::string& path, bool read_only) {
  ScopedFd fd(::open(path.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat("layer image not found: ", path));
    if (err == EACCES || err == EPERM || err == EROFS) {
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot open layer image ", read_only ? "read-only" : "read-write", ": ", path));
    }
    return ErrnoStatus(absl::StrCat("open(", path, ")"), err);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("fstat");
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("layer image is not a regular file: ", path));
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  absl::StatusOr<uint64_t> region_size = PmemRegionSize(file_size);
  if (!region_size.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(region_size.status().message(), " (0 bytes): ", path));
  }
  const int prot = read_only ? PROT_READ : PROT_READ | PROT_WRITE;
  // Reserve the whole window as private anonymous memory (the zero tail),
  // then map the file over its start. MAP_NORESERVE: the tail costs nothing
  // until a guest writes it.
  DSEC_ASSIGN_OR_RETURN(Mmap region, Mmap::Anonymous(*region_size, prot, MAP_NORESERVE));
  const uint64_t file_pages = (file_size + kPage - 1) & ~(kPage - 1);
  void* at = ::mmap(region.data(), file_pages, prot, MAP_SHARED | MAP_FIXED, fd.get(), 0);
  if (at == MAP_FAILED) return ErrnoStatus(absl::StrCat("mmap(", path, ")"));
  return LayerMapping(path, read_only, std::move(fd), file_size, std::move(region));
}

absl::Status LayerMapping::CheckSize() const {
  struct stat st;
  if (::fstat(fd_.get(), &st) != 0) return ErrnoStatus("fstat");
  if (static_cast<uint64_t>(st.st_size) != file_size_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("layer image %s changed size while mapped (%d -> %d bytes)", path_,
                        file_size_, static_cast<uint64_t>(st.st_size)));
  }
  return absl::OkStatus();
}

}  // namespace dsec::pmem
