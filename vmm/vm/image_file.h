// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "base/mmap.h"

namespace dsec::vm {

// A kernel or initrd image mapped read-only (MAP_PRIVATE) for the loaders:
// no copy through a heap buffer, and the page cache is shared with any other
// monitor booting the same file.
class ImageFile {
 public:
  // `what` names the image in errors: "kernel image /x: No such file ...".
  // NotFound / PermissionDenied / InvalidArgument (not a regular file, empty).
  static absl::StatusOr<ImageFile> Open(const std::string& path, const std::string& what);

  std::span<const uint8_t> bytes() const { return {map_.data(), map_.size()}; }

 private:
  explicit ImageFile(Mmap map) : map_(std::move(map)) {}
  Mmap map_;
};

}  // namespace dsec::vm
