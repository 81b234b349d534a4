// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/root_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::container {

namespace {

constexpr uint64_t kResolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;

absl::Status CheckPath(const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("path must be absolute: \"", path, "\""));
  }
  if (path.find('\0') != std::string::npos) return absl::InvalidArgumentError("path holds NUL");
  if (path.size() > 4096) return absl::InvalidArgumentError("path longer than 4096 bytes");
  return absl::OkStatus();
}

int OpenAt2(int dirfd, const std::string& path, uint64_t flags, uint64_t mode) {
  struct open_how how = {};
  how.flags = flags | O_CLOEXEC;
  how.mode = (flags & O_CREAT) != 0 ? mode : 0;
  how.resolve = kResolve;
  int fd;
  do {
    fd = static_cast<int>(::syscall(SYS_openat2, dirfd, path.c_str(), &how, sizeof(how)));
  } while (fd < 0 && errno == EAGAIN);
  return fd;
}

absl::StatusOr<ScopedFd> OpenRoot(const std::string& root) {
  int fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(absl::StrCat("open sandbox root ", root));
  return ScopedFd(fd);
}

absl::Status PathError(const std::string& what, const std::string& path, int err) {
  if (err == ENOENT) return absl::NotFoundError(absl::StrCat("no such file: ", path));
  if (err == ENOTDIR) return absl::NotFoundError(absl::StrCat("not a directory on the way: ", path));
  if (err == EISDIR) return absl::FailedPreconditionError(absl::StrCat("is a directory: ", path));
  if (err == ELOOP || err == EXDEV) {
    return absl::InvalidArgumentError(absl::StrCat("path leaves the sandbox root: ", path));
  }
  return ErrnoToStatus(absl::StrCat(what, " ", path), err);
}

}  // namespace

absl::StatusOr<std::string> ReadRootFile(const std::string& root, const std::string& path,
                                         uint64_t max_bytes) {
  DSEC_RETURN_IF_ERROR(CheckPath(path));
  DSEC_ASSIGN_OR_RETURN(ScopedFd rootfd, OpenRoot(root));
  int raw = OpenAt2(rootfd.get(), path, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0);
  if (raw < 0) return PathError("open", path, errno);
  ScopedFd fd(raw);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoToStatus("fstat");
  if (S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat("is a directory: ", path));
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("not a regular file: ", path));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, " is ", st.st_size, " bytes, more than the limit of ", max_bytes));
  }
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(absl::StrCat("read ", path));
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(path, " grew past the limit"));
    }
  }
  return out;
}

absl::Status WriteRootFile(const std::string& root, const std::string& path,
                           const std::string& data, uint32_t mode) {
  DSEC_RETURN_IF_ERROR(CheckPath(path));
  if (mode > 07777) return absl::InvalidArgumentError("mode must be at most 07777");
  DSEC_ASSIGN_OR_RETURN(ScopedFd rootfd, OpenRoot(root));
  // Parents, one component at a time, each resolved inside the root.
  std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  if (parts.empty()) return absl::InvalidArgumentError("path names the root directory");
  std::string prefix;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    std::string parent = prefix.empty() ? "/" : prefix;
    prefix = absl::StrCat(prefix, "/", parts[i]);
    int probe = OpenAt2(rootfd.get(), prefix, O_PATH | O_DIRECTORY, 0);
    if (probe >= 0) {
      ScopedFd close_it(probe);
      continue;
    }
    if (errno != ENOENT) return PathError("open", prefix, errno);
    int praw = OpenAt2(rootfd.get(), parent, O_PATH | O_DIRECTORY, 0);
    if (praw < 0) return PathError("open", parent, errno);
    ScopedFd pfd(praw);
    if (::mkdirat(pfd.get(), parts[i].c_str(), 0755) != 0 && errno != EEXIST) {
      return PathError("mkdir", prefix, errno);
    }
  }
  int raw = OpenAt2(rootfd.get(), path, O_WRONLY | O_CREAT | O_TRUNC | O_NOCTTY | O_NONBLOCK, mode);
  if (raw < 0) return PathError("create", path, errno);
  ScopedFd fd(raw);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoToStatus("fstat");
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("not a regular file: ", path));
  }
  if (::fchmod(fd.get(), mode) != 0) return ErrnoToStatus(absl::StrCat("fchmod ", path));
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd.get(), data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (errno == ENOSPC) {
        return absl::ResourceExhaustedError(absl::StrCat("the sandbox's writable layer is full (", path, ")"));
      }
      return ErrnoToStatus(absl::StrCat("write ", path));
    }
    off += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<tier::FileEntry>> ListRootDir(const std::string& root,
                                                   const std::string& path) {
  DSEC_RETURN_IF_ERROR(CheckPath(path));
  DSEC_ASSIGN_OR_RETURN(ScopedFd rootfd, OpenRoot(root));
  int raw = OpenAt2(rootfd.get(), path, O_RDONLY | O_DIRECTORY, 0);
  if (raw < 0) return PathError("open", path, errno);
  DIR* dir = ::fdopendir(raw);
  if (dir == nullptr) {
    int err = errno;
    ScopedFd not_taken(raw);  // fdopendir did not take it
    return ErrnoToStatus("fdopendir", err);
  }
  std::vector<tier::FileEntry> entries;
  while (struct dirent* de = ::readdir(dir)) {
    std::string name = de->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (::fstatat(::dirfd(dir), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    tier::FileEntry e;
    e.name = name;
    e.type = S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "dir" : S_ISLNK(st.st_mode) ? "symlink" : "other";
    e.size = static_cast<uint64_t>(st.st_size);
    e.mode = st.st_mode & 07777;
    entries.push_back(std::move(e));
  }
  ::closedir(dir);
  std::sort(entries.begin(), entries.end(),
            [](const tier::FileEntry& a, const tier::FileEntry& b) { return a.name < b.name; });
  return entries;
}

}  // namespace dsec::container
