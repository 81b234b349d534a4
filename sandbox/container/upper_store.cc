// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/upper_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status.h"
#include "sandbox/container/state_dir.h"

namespace dsec::container {

absl::StatusOr<std::unique_ptr<UpperStore>> UpperStore::Create(uint64_t size_bytes) {
  if (size_bytes == 0) return absl::InvalidArgumentError("upper store: size 0");
  DSEC_ASSIGN_OR_RETURN(DetachedMount mount,
                        DetachedMount::Tmpfs(size_bytes, false, {{"noswap", ""}, {"nr_inodes", "0"}}));
  struct stat st {};
  if (::stat(mount.path().c_str(), &st) != 0) return ErrnoToStatus("upper store: stat");
  return std::unique_ptr<UpperStore>(new UpperStore(std::move(mount), st.st_dev));
}

UpperStore* UpperStore::Default() {
  static UpperStore* const store = []() -> UpperStore* {
    if (!OverlayAcceptsDetachedLayers()) {
      DSEC_LOG(info, "container: overlayfs takes no upper on a detached mount here: a tmpfs per sandbox");
      return nullptr;
    }
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page = ::sysconf(_SC_PAGESIZE);
    absl::StatusOr<std::unique_ptr<UpperStore>> s =
        pages > 0 && page > 0 ? Create(static_cast<uint64_t>(pages) * static_cast<uint64_t>(page))
                              : absl::InternalError("sysconf(_SC_PHYS_PAGES)");
    if (!s.ok()) {
      DSEC_LOG(warn, "container: no shared store for writable layers ({}): a tmpfs per sandbox",
               s.status().ToString());
      return nullptr;
    }
    return s->release();  // lives as long as the process
  }();
  return store;
}

absl::StatusOr<std::string> UpperStore::Make(const std::string& id) {
  const std::string name = absl::StrCat(id, ".", seq_.fetch_add(1, std::memory_order_relaxed));
  if (::mkdir(PathOf(name).c_str(), 0755) != 0) {
    return ErrnoToStatus(absl::StrCat("upper store: mkdir ", name));
  }
  held_.fetch_add(1, std::memory_order_relaxed);
  return name;
}

std::string UpperStore::PathOf(const std::string& name) const { return absl::StrCat(mount_.path(), "/", name); }

absl::Status UpperStore::Remove(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat("upper store: bad name \"", name, "\""));
  }
  const std::string path = PathOf(name);
  if (::access(path.c_str(), F_OK) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoToStatus(absl::StrCat("upper store: ", name));
  }
  DSEC_RETURN_IF_ERROR(RemoveTree(path));
  held_.fetch_sub(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

}  // namespace dsec::container
