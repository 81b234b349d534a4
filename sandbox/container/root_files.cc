// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/root_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/inotify_tree.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::container {

namespace {

constexpr uint64_t kResolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
// As the kernel's own limit on links followed in one lookup.
constexpr int kMaxLinkHops = 40;

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

absl::Status PathError(const std::string& what, const std::string& path, int err) {
  if (err == ENOENT) return absl::NotFoundError(absl::StrCat("no such file: ", path));
  if (err == ENOTDIR) return absl::NotFoundError(absl::StrCat("not a directory on the way: ", path));
  if (err == EISDIR) return absl::FailedPreconditionError(absl::StrCat("is a directory: ", path));
  if (err == ELOOP || err == EXDEV) {
    return absl::InvalidArgumentError(absl::StrCat("path leaves the sandbox root: ", path));
  }
  if (err == EACCES || err == EPERM) {
    return absl::FailedPreconditionError(absl::StrCat("the sandbox's root may not ", what, " ", path));
  }
  if (err == ENOSPC || err == EDQUOT) {
    return absl::ResourceExhaustedError(absl::StrCat("the sandbox's writable layer is full (", path, ")"));
  }
  if (err == ENOMEM) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the sandbox's memory limit does not hold ", path, " (its writable layer is memory)"));
  }
  if (err == EFBIG) return absl::ResourceExhaustedError(absl::StrCat("file too large: ", path));
  return ErrnoToStatus(absl::StrCat(what, " ", path), err);
}

// The root is opened with the daemon's rights (following /proc/<init>/root
// needs them: the init is not dumpable), everything after it with the
// sandbox's. Members in that order: the credentials go back first.
struct Session {
  ScopedFd root;
  std::unique_ptr<ScopedFileCredentials> creds;
};

absl::StatusOr<Session> Begin(const std::string& root, const std::string& path,
                              const FileCredentials& creds) {
  DSEC_RETURN_IF_ERROR(CheckPath(path));
  Session s;
  s.root = ScopedFd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!s.root.valid()) return ErrnoToStatus("open the sandbox's root");
  DSEC_ASSIGN_OR_RETURN(s.creds, ScopedFileCredentials::Create(creds));
  return s;
}

enum class Want { kFile, kDir };

const char* KindOf(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFIFO: return "FIFO";
    case S_IFSOCK: return "socket";
    case S_IFCHR: return "character device";
    case S_IFBLK: return "block device";
    default: return "special file";
  }
}

// What the API serves: a regular file or directory on the sandbox's own
// file systems. Its overlay root and tmpfs mounts (/dev, /dev/shm, /tmp,
// and what a sandbox in a user namespace mounts itself) hold only what the
// sandbox wrote; procfs, sysfs and the other kernel file systems a sandbox
// sees are the host kernel's interfaces, whoever opens them.
absl::Status CheckServed(int fd, const std::string& path, Want want) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoToStatus(absl::StrCat("fstat ", path));
  if (S_ISDIR(st.st_mode)) {
    if (want == Want::kFile) return absl::FailedPreconditionError(absl::StrCat("is a directory: ", path));
  } else if (S_ISREG(st.st_mode)) {
    if (want == Want::kDir) return absl::NotFoundError(absl::StrCat("not a directory: ", path));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is a ", KindOf(st.st_mode), ", which the files API does not open"));
  }
  struct statfs sf;
  if (::fstatfs(fd, &sf) != 0) return ErrnoToStatus(absl::StrCat("fstatfs ", path));
  if (sf.f_type != OVERLAYFS_SUPER_MAGIC && sf.f_type != TMPFS_MAGIC) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is not on the sandbox's own file systems (/proc, /sys and other kernel file systems "
        "are not served)"));
  }
  return absl::OkStatus();
}

// `path` (links followed inside the root) as an O_PATH descriptor: opening
// it has no effect of its own.
absl::StatusOr<ScopedFd> Find(int rootfd, const std::string& path, Want want) {
  int raw = OpenAt2(rootfd, path, O_PATH | (want == Want::kDir ? O_DIRECTORY : 0), 0);
  if (raw < 0) return PathError("open", path, errno);
  ScopedFd fd(raw);
  DSEC_RETURN_IF_ERROR(CheckServed(fd.get(), path, want));
  return fd;
}

// Opens the inode an O_PATH descriptor names (not whatever its path names
// by now), with the thread's (the sandbox's) credentials checked.
absl::StatusOr<ScopedFd> Reopen(const ScopedFd& found, int flags, const std::string& path) {
  const std::string self = absl::StrCat("/proc/self/fd/", found.get());
  int raw = ::open(self.c_str(), flags | O_CLOEXEC | O_NOCTTY);
  if (raw < 0) return PathError("open", path, errno);
  return ScopedFd(raw);
}

// The directory `dir` (links followed inside the root), made with its
// missing parents; each directory made in is checked first.
absl::StatusOr<ScopedFd> MakeParents(int rootfd, const std::string& dir) {
  std::vector<std::string> parts = absl::StrSplit(dir, '/', absl::SkipEmpty());
  DSEC_ASSIGN_OR_RETURN(ScopedFd cur, Find(rootfd, "/", Want::kDir));
  std::string prefix;
  for (const std::string& part : parts) {
    const std::string parent = prefix.empty() ? "/" : prefix;
    prefix = absl::StrCat(prefix, "/", part);
    int raw = OpenAt2(rootfd, prefix, O_PATH | O_DIRECTORY, 0);
    if (raw < 0) {
      if (errno != ENOENT) return PathError("open", prefix, errno);
      DSEC_RETURN_IF_ERROR(CheckServed(cur.get(), parent, Want::kDir));
      if (::mkdirat(cur.get(), part.c_str(), 0755) != 0 && errno != EEXIST) {
        return PathError("mkdir", prefix, errno);
      }
      raw = OpenAt2(rootfd, prefix, O_PATH | O_DIRECTORY, 0);
      if (raw < 0) return PathError("open", prefix, errno);
    }
    cur = ScopedFd(raw);
  }
  DSEC_RETURN_IF_ERROR(CheckServed(cur.get(), dir.empty() ? "/" : dir, Want::kDir));
  return cur;
}

absl::Status WriteData(int fd, const std::string& data, const std::string& path) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return PathError("write", path, errno);
    off += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadRootFile(const std::string& root, const std::string& path,
                                         uint64_t max_bytes, const FileCredentials& creds) {
  DSEC_ASSIGN_OR_RETURN(Session s, Begin(root, path, creds));
  DSEC_ASSIGN_OR_RETURN(ScopedFd found, Find(s.root.get(), path, Want::kFile));
  DSEC_ASSIGN_OR_RETURN(ScopedFd fd, Reopen(found, O_RDONLY | O_NONBLOCK, path));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoToStatus("fstat");
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, " is ", st.st_size, " bytes, more than the limit of ", max_bytes));
  }
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return PathError("read", path, errno);
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(path, " grew past the limit"));
    }
  }
  return out;
}

absl::StatusOr<ScopedFd> OpenRootFileForWrite(const std::string& root, const std::string& path, uint32_t mode,
                                              const FileCredentials& creds) {
  if (mode > 07777) return absl::InvalidArgumentError("mode must be at most 07777");
  DSEC_ASSIGN_OR_RETURN(Session s, Begin(root, path, creds));
  std::string target = path;
  for (int hop = 0; hop <= kMaxLinkHops; ++hop) {
    int raw = OpenAt2(s.root.get(), target, O_PATH, 0);
    if (raw >= 0) {
      ScopedFd found(raw);
      DSEC_RETURN_IF_ERROR(CheckServed(found.get(), path, Want::kFile));
      DSEC_ASSIGN_OR_RETURN(ScopedFd fd, Reopen(found, O_WRONLY | O_TRUNC | O_NONBLOCK, path));
      if (::fchmod(fd.get(), mode) != 0) return PathError("chmod", path, errno);
      return fd;
    }
    if (errno != ENOENT) return PathError("open", path, errno);
    // Missing: its parents are made, then the file itself, exclusively,
    // in the checked parent. A dangling link is followed by hand.
    const size_t slash = target.rfind('/');
    const std::string dir = target.substr(0, slash);
    const std::string name = target.substr(slash + 1);
    if (name.empty() || name == "." || name == "..") {
      return absl::InvalidArgumentError(absl::StrCat("path does not name a file: ", path));
    }
    DSEC_ASSIGN_OR_RETURN(ScopedFd parent, MakeParents(s.root.get(), dir));
    struct stat st;
    if (::fstatat(parent.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
      std::string link(4096, '\0');
      ssize_t n = ::readlinkat(parent.get(), name.c_str(), link.data(), link.size());
      if (n < 0) return PathError("readlink", path, errno);
      link.resize(static_cast<size_t>(n));
      target = link.rfind('/', 0) == 0 ? link : absl::StrCat(dir, "/", link);
      continue;
    }
    raw = ::openat(parent.get(), name.c_str(),
                   O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, mode);
    if (raw < 0 && errno == EEXIST) continue;  // made meanwhile: look again
    if (raw < 0) return PathError("create", path, errno);
    ScopedFd fd(raw);
    if (::fchmod(fd.get(), mode) != 0) return PathError("chmod", path, errno);
    return fd;
  }
  return absl::InvalidArgumentError(absl::StrCat("too many symbolic links on the way: ", path));
}

absl::Status WriteRootFile(const std::string& root, const std::string& path,
                           const std::string& data, uint32_t mode, const FileCredentials& creds) {
  DSEC_ASSIGN_OR_RETURN(ScopedFd fd, OpenRootFileForWrite(root, path, mode, creds));
  return WriteData(fd.get(), data, path);
}

absl::Status RootFileWriteError(const std::string& path, int err) { return PathError("write", path, err); }

absl::StatusOr<std::vector<tier::FileEntry>> ListRootDir(const std::string& root,
                                                   const std::string& path,
                                                   const FileCredentials& creds) {
  DSEC_ASSIGN_OR_RETURN(Session s, Begin(root, path, creds));
  DSEC_ASSIGN_OR_RETURN(ScopedFd found, Find(s.root.get(), path, Want::kDir));
  DSEC_ASSIGN_OR_RETURN(ScopedFd fd, Reopen(found, O_RDONLY | O_DIRECTORY, path));
  DIR* dir = ::fdopendir(fd.get());
  if (dir == nullptr) return ErrnoToStatus("fdopendir");
  (void)fd.Release();  // the DIR owns it now
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

namespace dsec::container {

namespace {

// The directories a watch reaches: those the files API serves, found
// under its walls (openat2 inside the root, the sandbox root's credentials).
class RootTree final : public WatchedTree {
 public:
  RootTree(std::string root, FileCredentials creds) : root_(std::move(root)), creds_(creds) {}

  absl::StatusOr<std::unique_ptr<Walk>> BeginWalk() override {
    auto walk = std::make_unique<RootWalk>();
    DSEC_ASSIGN_OR_RETURN(walk->s, Begin(root_, "/", creds_));
    return walk;
  }

 private:
  struct RootWalk final : Walk {
    Session s;
    absl::StatusOr<ScopedFd> OpenDir(const std::string& path) override { return Find(s.root.get(), path, Want::kDir); }
    bool Serves(int fd, const std::string& path) override { return CheckServed(fd, path, Want::kDir).ok(); }
  };

  const std::string root_;
  const FileCredentials creds_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<tier::DirWatch>> WatchRootDir(const std::string& root, const std::string& path,
                                                             bool recursive, size_t max_dirs,
                                                             const FileCredentials& creds) {
  DSEC_RETURN_IF_ERROR(CheckPath(path));
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<InotifyDirWatch> w,
                        InotifyDirWatch::Create(std::make_unique<RootTree>(root, creds), path, recursive, max_dirs));
  return std::unique_ptr<tier::DirWatch>(std::move(w));
}

}  // namespace dsec::container
