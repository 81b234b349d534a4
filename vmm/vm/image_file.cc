// SPDX-License-Identifier: Apache-2.0
#include "vmm/vm/image_file.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::vm {

absl::StatusOr<ImageFile> ImageFile::Open(const std::string& path, const std::string& what) {
  const std::string name = absl::StrCat(what, " image ", path);
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " image: no path given"));
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(absl::StrCat("open ", name));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoToStatus(absl::StrCat("fstat ", name));
  if (!S_ISREG(st.st_mode))
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a regular file"));
  if (st.st_size == 0) return absl::InvalidArgumentError(absl::StrCat(name, ": file is empty"));
  auto map = Mmap::File(fd.get(), static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE);
  if (!map.ok()) return Annotate(map.status(), name);
  return ImageFile(std::move(*map));
}

}  // namespace dsec::vm
