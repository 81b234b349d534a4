// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/root_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/base/thread_annotations.h"
#include "base/clock.h"
#include "base/eventfd.h"
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

absl::Status WriteData(int fd, const std::string& data, uint32_t mode, const std::string& path) {
  if (::fchmod(fd, mode) != 0) return PathError("chmod", path, errno);
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

absl::Status WriteRootFile(const std::string& root, const std::string& path,
                           const std::string& data, uint32_t mode, const FileCredentials& creds) {
  if (mode > 07777) return absl::InvalidArgumentError("mode must be at most 07777");
  DSEC_ASSIGN_OR_RETURN(Session s, Begin(root, path, creds));
  std::string target = path;
  for (int hop = 0; hop <= kMaxLinkHops; ++hop) {
    int raw = OpenAt2(s.root.get(), target, O_PATH, 0);
    if (raw >= 0) {
      ScopedFd found(raw);
      DSEC_RETURN_IF_ERROR(CheckServed(found.get(), path, Want::kFile));
      DSEC_ASSIGN_OR_RETURN(ScopedFd fd, Reopen(found, O_WRONLY | O_TRUNC | O_NONBLOCK, path));
      return WriteData(fd.get(), data, mode, path);
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
    return WriteData(fd.get(), data, mode, path);
  }
  return absl::InvalidArgumentError(absl::StrCat("too many symbolic links on the way: ", path));
}

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

constexpr uint32_t kWatchMask = IN_CREATE | IN_DELETE | IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO |
                                IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK;

std::string JoinRel(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : absl::StrCat(dir, "/", name);
}

bool Within(const std::string& rel, const std::string& top) {
  return rel == top || (rel.size() > top.size() && rel.compare(0, top.size(), top) == 0 && rel[top.size()] == '/');
}

// The watch of WatchRootDir: one inotify instance, a watch per directory
// (wd -> its path relative to the watched directory, "" for it).
class RootDirWatch final : public tier::DirWatch {
 public:
  RootDirWatch(std::string root, std::string path, bool recursive, size_t max_dirs, FileCredentials creds,
               ScopedFd inotify, EventFd closed)
      : root_(std::move(root)), path_(std::move(path)), recursive_(recursive), max_dirs_(max_dirs),
        creds_(creds), inotify_(std::move(inotify)), closed_(std::move(closed)) {}

  absl::Status Init() {
    std::lock_guard<std::mutex> lock(mu_);
    return AddTree("");
  }

  absl::StatusOr<std::vector<tier::FileEvent>> Next(int64_t timeout_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.ok()) return failed_;
    struct pollfd fds[2] = {{inotify_.get(), POLLIN, 0}, {closed_.fd(), POLLIN, 0}};
    const int64_t deadline = timeout_ms < 0 ? -1 : MonotonicNowNs() + timeout_ms * 1'000'000;
    for (;;) {
      int wait_ms = -1;
      if (deadline >= 0) wait_ms = static_cast<int>(std::max<int64_t>(0, (deadline - MonotonicNowNs()) / 1'000'000));
      const int n = ::poll(fds, 2, wait_ms);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoToStatus("poll the directory watch");
      break;
    }
    if (fds[1].revents != 0) {
      failed_ = absl::UnavailableError("the watch was closed: its sandbox went");
      return failed_;
    }
    // Every event queued, then translated: a directory's MOVED_FROM is
    // matched with its MOVED_TO (same cookie) among all of them.
    std::vector<Raw> raw;
    alignas(struct inotify_event) char buf[65536];
    for (;;) {
      const ssize_t n = ::read(inotify_.get(), buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      if (n < 0) return ErrnoToStatus("read the directory watch");
      if (n == 0) break;
      for (ssize_t off = 0; off < n;) {
        const auto* ev = reinterpret_cast<const struct inotify_event*>(buf + off);
        raw.push_back(Raw{ev->wd, ev->mask, ev->cookie, ev->len > 0 ? std::string(ev->name) : std::string()});
        off += static_cast<ssize_t>(sizeof(struct inotify_event) + ev->len);
      }
    }
    std::vector<tier::FileEvent> out;
    for (size_t i = 0; i < raw.size(); ++i) Translate(raw, i, &out);
    if (out.empty() && !failed_.ok()) return failed_;
    return out;
  }

  void Close() override { (void)closed_.Signal(); }

 private:
  std::string AbsPath(const std::string& rel) const {
    if (rel.empty()) return path_;
    return path_ == "/" ? absl::StrCat("/", rel) : absl::StrCat(path_, "/", rel);
  }

  // Watches the directory `rel` (the watched one for ""), and with
  // recursive_ every directory below it. Below the watched directory a
  // link is not followed and a directory that is gone, a link or not on
  // the sandbox's own file systems is left out, not an error.
  absl::Status AddTree(const std::string& rel) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    DSEC_ASSIGN_OR_RETURN(Session s, Begin(root_, path_, creds_));
    std::vector<std::pair<ScopedFd, std::string>> todo;
    if (rel.empty()) {
      DSEC_ASSIGN_OR_RETURN(ScopedFd top, Find(s.root.get(), path_, Want::kDir));
      todo.emplace_back(std::move(top), "");
    } else {
      const size_t slash = rel.rfind('/');
      const std::string parent = AbsPath(slash == std::string::npos ? "" : rel.substr(0, slash));
      const std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
      ScopedFd pfd(OpenAt2(s.root.get(), parent, O_PATH | O_DIRECTORY, 0));
      if (!pfd.valid()) return absl::OkStatus();
      ScopedFd fd(::openat(pfd.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!fd.valid() || !CheckServed(fd.get(), AbsPath(rel), Want::kDir).ok()) return absl::OkStatus();
      todo.emplace_back(std::move(fd), rel);
    }
    while (!todo.empty()) {
      auto [fd, dir] = std::move(todo.back());
      todo.pop_back();
      if (dirs_.size() >= max_dirs_ && wds_.find(dir) == wds_.end()) {
        return absl::ResourceExhaustedError(absl::StrCat("more than ", max_dirs_, " directories under ", path_,
                                                         ": a watch holds that many at most"));
      }
      const std::string self = absl::StrCat("/proc/self/fd/", fd.get());
      const int wd = ::inotify_add_watch(inotify_.get(), self.c_str(), kWatchMask);
      if (wd < 0) {
        const int err = errno;
        if (err == ENOSPC) {
          return absl::ResourceExhaustedError(
              "the host's inotify watches are used up (fs.inotify.max_user_watches)");
        }
        if (!dir.empty()) continue;  // one the sandbox's root may not read, or gone
        return PathError("watch", path_, err);
      }
      if (auto it = dirs_.find(wd); it != dirs_.end()) continue;  // seen by another path (a bind mount)
      dirs_[wd] = dir;
      wds_[dir] = wd;
      if (!recursive_) break;
      ScopedFd rd(::openat(fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!rd.valid()) continue;
      DIR* d = ::fdopendir(rd.get());
      if (d == nullptr) continue;
      (void)rd.Release();
      while (struct dirent* de = ::readdir(d)) {
        const std::string name = de->d_name;
        if (name == "." || name == ".." || (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)) continue;
        ScopedFd sub(::openat(::dirfd(d), de->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        const std::string sub_rel = JoinRel(dir, name);
        if (!sub.valid() || !CheckServed(sub.get(), AbsPath(sub_rel), Want::kDir).ok()) continue;
        todo.emplace_back(std::move(sub), sub_rel);
      }
      ::closedir(d);
    }
    return absl::OkStatus();
  }

  void DropTree(const std::string& top) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = wds_.lower_bound(top); it != wds_.end() && Within(it->first, top);) {
      (void)::inotify_rm_watch(inotify_.get(), it->second);
      dirs_.erase(it->second);
      it = wds_.erase(it);
    }
  }

  void Rename(const std::string& from, const std::string& to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::pair<std::string, int>> moved;
    for (auto it = wds_.lower_bound(from); it != wds_.end() && Within(it->first, from);) {
      moved.emplace_back(to + it->first.substr(from.size()), it->second);
      it = wds_.erase(it);
    }
    for (auto& [rel, wd] : moved) {
      dirs_[wd] = rel;
      wds_[rel] = wd;
    }
  }

  // A directory made or moved in while watching: one that is gone again
  // (or the sandbox with it) is no error; a watch over its limits is.
  void AddBelow(const std::string& rel) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::Status s = AddTree(rel);
    if (absl::IsResourceExhausted(s)) Fail(std::move(s));
  }

  void Fail(absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (failed_.ok()) failed_ = std::move(s);
  }

  struct Raw {
    int wd;
    uint32_t mask;
    uint32_t cookie;
    std::string name;
    bool paired = false;  // a MOVED_TO whose MOVED_FROM renamed its watches
  };

  void Translate(std::vector<Raw>& raw, size_t i, std::vector<tier::FileEvent>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    using Type = tier::FileEvent::Type;
    const Raw& ev = raw[i];
    if ((ev.mask & IN_Q_OVERFLOW) != 0) {
      return Fail(absl::ResourceExhaustedError(
          "events were lost: more came at once than the kernel queues (fs.inotify.max_queued_events)"));
    }
    auto it = dirs_.find(ev.wd);
    if (it == dirs_.end()) return;  // a directory dropped meanwhile
    const std::string rel = it->second;
    if ((ev.mask & IN_UNMOUNT) != 0) {
      return Fail(absl::UnavailableError("the sandbox's file system went away"));
    }
    if ((ev.mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) != 0) {
      if (rel.empty()) {
        return Fail(absl::NotFoundError(absl::StrCat("the watched directory ", path_, " was removed or moved")));
      }
      if ((ev.mask & IN_IGNORED) != 0) {
        wds_.erase(rel);
        dirs_.erase(it);
      }
      return;
    }
    const std::string name = JoinRel(rel, ev.name);
    const bool dir = (ev.mask & IN_ISDIR) != 0;
    auto add = [&](Type t) { out->push_back(tier::FileEvent{name, t}); };
    if ((ev.mask & IN_CREATE) != 0) {
      add(Type::kCreate);
      if (dir && recursive_) AddBelow(name);
    }
    if ((ev.mask & IN_MOVED_FROM) != 0) {
      add(Type::kRename);
      if (dir && recursive_) {
        // Moved within the tree: its watches take the new name now (the
        // events after this one name it so); moved out: they go now.
        size_t to = i + 1;
        while (to < raw.size() && !((raw[to].mask & IN_MOVED_TO) != 0 && raw[to].cookie == ev.cookie)) ++to;
        auto dest = to < raw.size() ? dirs_.find(raw[to].wd) : dirs_.end();
        if (dest != dirs_.end()) {
          Rename(name, JoinRel(dest->second, raw[to].name));
          raw[to].paired = true;
        } else {
          DropTree(name);
        }
      }
    }
    if ((ev.mask & IN_MOVED_TO) != 0) {
      add(Type::kCreate);
      if (dir && recursive_ && !ev.paired) AddBelow(name);
    }
    if ((ev.mask & IN_DELETE) != 0) add(Type::kRemove);
    if ((ev.mask & IN_MODIFY) != 0) add(Type::kWrite);
    if ((ev.mask & IN_ATTRIB) != 0) add(Type::kChmod);
  }

  const std::string root_;
  const std::string path_;
  const bool recursive_;
  const size_t max_dirs_;
  const FileCredentials creds_;
  const ScopedFd inotify_;
  const EventFd closed_;
  std::mutex mu_;
  std::map<int, std::string> dirs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> wds_ ABSL_GUARDED_BY(mu_);
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<tier::DirWatch>> WatchRootDir(const std::string& root, const std::string& path,
                                                             bool recursive, size_t max_dirs,
                                                             const FileCredentials& creds) {
  DSEC_RETURN_IF_ERROR(CheckPath(path));
  ScopedFd in(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!in.valid()) {
    if (errno == EMFILE) {
      return absl::ResourceExhaustedError("the host's inotify instances are used up (fs.inotify.max_user_instances)");
    }
    return ErrnoToStatus("inotify_init1");
  }
  DSEC_ASSIGN_OR_RETURN(EventFd closed, EventFd::Create(EFD_NONBLOCK));
  auto w = std::make_unique<RootDirWatch>(root, path, recursive, std::max<size_t>(max_dirs, 1), creds, std::move(in),
                                          std::move(closed));
  DSEC_RETURN_IF_ERROR(w->Init());
  return w;
}

}  // namespace dsec::container
