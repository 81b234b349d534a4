// SPDX-License-Identifier: Apache-2.0
#include "guest-kernel/agent/sys_util.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace dsec::agent {

absl::StatusOr<ScopedFd> OpenAt2(int dirfd, const std::string& path, uint64_t flags, mode_t mode,
                                 uint64_t resolve) {
  open_how how = {};
  how.flags = flags | O_CLOEXEC;
  how.mode = (flags & (O_CREAT | O_TMPFILE)) != 0 ? mode : 0;
  how.resolve = resolve;
  for (int attempt = 0;; ++attempt) {
    long fd = syscall(SYS_openat2, dirfd, path.c_str(), &how, sizeof(how));
    if (fd >= 0) return ScopedFd(static_cast<int>(fd));
    if (errno == EINTR || (errno == EAGAIN && attempt < 16)) continue;
    if (errno == ENOSYS) return absl::UnavailableError("openat2: not supported by this kernel");
    if (errno == EXDEV || errno == ELOOP) {
      return absl::PermissionDeniedError(absl::StrCat(
          "path ", path, " escapes its root or crosses a refused link (errno ", errno, ")"));
    }
    return ErrnoToStatus(absl::StrCat("open ", path));
  }
}

std::string FdPath(int fd, std::string_view name) {
  std::string p = absl::StrCat("/proc/self/fd/", fd);
  if (!name.empty()) absl::StrAppend(&p, "/", std::string(name));
  return p;
}

absl::StatusOr<std::vector<XattrPair>> ListXattrs(const std::string& path) {
  std::vector<XattrPair> out;
  std::string names;
  for (int attempt = 0;; ++attempt) {
    ssize_t n = llistxattr(path.c_str(), nullptr, 0);
    if (n < 0) {
      if (errno == ENOTSUP) return out;
      return ErrnoToStatus(absl::StrCat("llistxattr ", path));
    }
    names.resize(static_cast<size_t>(n));
    if (n == 0) return out;
    n = llistxattr(path.c_str(), names.data(), names.size());
    if (n >= 0) {
      names.resize(static_cast<size_t>(n));
      break;
    }
    if (errno != ERANGE || attempt >= 4) return ErrnoToStatus(absl::StrCat("llistxattr ", path));
  }
  size_t pos = 0;
  while (pos < names.size()) {
    size_t end = names.find('\0', pos);
    if (end == std::string::npos) end = names.size();
    std::string name = names.substr(pos, end - pos);
    pos = end + 1;
    if (name.empty()) continue;
    std::string value;
    for (int attempt = 0;; ++attempt) {
      ssize_t n = lgetxattr(path.c_str(), name.c_str(), nullptr, 0);
      if (n < 0) {
        if (errno == ENODATA) break;  // removed meanwhile
        return ErrnoToStatus(absl::StrCat("lgetxattr ", path, " ", name));
      }
      value.resize(static_cast<size_t>(n));
      n = lgetxattr(path.c_str(), name.c_str(), value.data(), value.size());
      if (n >= 0) {
        value.resize(static_cast<size_t>(n));
        out.push_back({std::move(name), std::move(value)});
        break;
      }
      if (errno != ERANGE || attempt >= 4) {
        return ErrnoToStatus(absl::StrCat("lgetxattr ", path, " ", name));
      }
    }
  }
  return out;
}

absl::Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus("write");
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace dsec::agent
