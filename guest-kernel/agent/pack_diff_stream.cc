// SPDX-License-Identifier: Apache-2.0
// Host side of pack_diff: MaterializeDiff. The walker is pack_diff_walk.cc.
#include "guest-kernel/agent/pack_diff_stream.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "guest-kernel/agent/sys_util.h"
#include "base/status.h"

namespace dsec::agent {

namespace {

constexpr size_t kMaxPathBytes = 4096;
constexpr size_t kMaxNameBytes = 255;
constexpr uint64_t kBeneath =
    RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;

absl::Status Bad(const std::string& path, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("pack_diff stream: entry \"", path, "\": ", std::string(why)));
}

// Guest-controlled: a path must be relative and normalised.
absl::Status CheckPath(const std::string& path) {
  if (path.empty() || path.size() > kMaxPathBytes) return Bad(path, "empty or too long");
  if (path.find('\0') != std::string::npos) return Bad(path, "contains NUL");
  if (path[0] == '/') return Bad(path, "absolute path");
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t end = path.find('/', pos);
    if (end == std::string::npos) end = path.size();
    std::string_view comp(path.data() + pos, end - pos);
    if (comp.empty() || comp == "." || comp == "..") return Bad(path, "non-normalised component");
    if (comp.size() > kMaxNameBytes) return Bad(path, "component too long");
    pos = end + 1;
  }
  return absl::OkStatus();
}

std::pair<std::string, std::string> SplitParent(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {"", path};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

timespec Ts(int64_t ns) {
  timespec t;
  int64_t sec = ns / 1'000'000'000;
  int64_t rem = ns % 1'000'000'000;
  if (rem < 0) {
    rem += 1'000'000'000;
    --sec;
  }
  t.tv_sec = static_cast<time_t>(sec);
  t.tv_nsec = static_cast<long>(rem);
  return t;
}

class Materializer {
 public:
  Materializer(FrameSource& source, const MaterializeOptions& options)
      : source_(source), options_(options) {}

  absl::StatusOr<DiffStats> Run(const std::string& dest_dir) {
    int fd = open(dest_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(absl::StrCat("open ", dest_dir));
    dest_ = ScopedFd(fd);
    for (;;) {
      DSEC_ASSIGN_OR_RETURN(Frame f, NextFrame());
      if (f.type == MsgType::kDiffEnd) {
        DSEC_ASSIGN_OR_RETURN(DiffEnd end, Decode<DiffEnd>(f));
        if (end.entries != stats_.entries || end.data_bytes != stats_.data_bytes) {
          return absl::InvalidArgumentError(absl::StrCat(
              "pack_diff stream: DIFF_END announces ", end.entries, " entries / ", end.data_bytes,
              " bytes, received ", stats_.entries, " / ", stats_.data_bytes));
        }
        break;
      }
      DSEC_ASSIGN_OR_RETURN(DiffEntry e, Decode<DiffEntry>(f));
      if (++stats_.entries > options_.max_entries) {
        return absl::ResourceExhaustedError("pack_diff stream: too many entries");
      }
      DSEC_RETURN_IF_ERROR(Apply(e));
    }
    return FinishDirs();
  }

 private:
  absl::StatusOr<Frame> NextFrame() {
    DSEC_ASSIGN_OR_RETURN(Frame f, source_.NextFrame());
    if (f.type == MsgType::kError) {
      DSEC_ASSIGN_OR_RETURN(ErrorMsg err, Decode<ErrorMsg>(f));
      return StatusFromError(err);
    }
    return f;
  }

  absl::StatusOr<ScopedFd> OpenDir(const std::string& rel) {
    if (rel.empty()) {
      int fd = fcntl(dest_.get(), F_DUPFD_CLOEXEC, 0);
      if (fd < 0) return ErrnoStatus("dup");
      return ScopedFd(fd);
    }
    absl::StatusOr<ScopedFd> fd = OpenAt2(dest_.get(), rel, O_RDONLY | O_DIRECTORY, 0, kBeneath);
    if (!fd.ok())
      return Bad(rel, absl::StrCat("not a directory of this stream: ",
                                   std::string(fd.status().message())));
    return fd;
  }

  absl::Status SetXattrs(const DiffEntry& e, int fd, const std::string& path_for_l) {
    if (e.xattrs.size() > options_.max_xattrs_per_entry) return Bad(e.path, "too many xattrs");
    for (const Xattr& x : e.xattrs) {
      if (x.name.empty() || x.name.find('\0') != std::string::npos || x.name.size() > 255) {
        return Bad(e.path, "invalid xattr name");
      }
      int rc = fd >= 0 ? fsetxattr(fd, x.name.c_str(), x.value.data(), x.value.size(), 0)
                       : lsetxattr(path_for_l.c_str(), x.name.c_str(), x.value.data(),
                                   x.value.size(), 0);
      if (rc != 0) return ErrnoToStatus(absl::StrCat("setxattr ", e.path, " ", x.name));
    }
    return absl::OkStatus();
  }

  // Owner, mode and xattrs of an inode we hold open (files, directories).
  absl::Status SetFdMeta(const DiffEntry& e, int fd, bool chmod_now) {
    if (fchown(fd, e.uid, e.gid) != 0) return ErrnoToStatus(absl::StrCat("chown ", e.path));
    // After chown, which clears set-id bits and file capabilities.
    if (chmod_now && fchmod(fd, e.mode) != 0) return ErrnoToStatus(absl::StrCat("chmod ", e.path));
    return SetXattrs(e, fd, "");
  }

  absl::Status Apply(const DiffEntry& e) {
    if (e.path == ".") {
      if (e.type != DiffType::kDir || root_seen_ || stats_.entries != 1) {
        return Bad(e.path, "the root entry must come first and be a directory");
      }
      root_seen_ = true;
      DSEC_RETURN_IF_ERROR(SetFdMeta(e, dest_.get(), /*chmod_now=*/false));
      dirs_.push_back({"", e});
      return absl::OkStatus();
    }
    DSEC_RETURN_IF_ERROR(CheckPath(e.path));
    auto [parent, name] = SplitParent(e.path);
    DSEC_ASSIGN_OR_RETURN(ScopedFd pfd, OpenDir(parent));
    const int p = pfd.get();
    switch (e.type) {
      case DiffType::kDir: {
        if (mkdirat(p, name.c_str(), 0700) != 0)
          return ErrnoToStatus(absl::StrCat("mkdir ", e.path));
        int fd = openat(p, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) return ErrnoToStatus(absl::StrCat("open ", e.path));
        ScopedFd dfd(fd);
        DSEC_RETURN_IF_ERROR(SetFdMeta(e, dfd.get(), /*chmod_now=*/false));
        // Mode and times last: children change the mtime, and a read-only
        // mode must not stop their creation.
        dirs_.push_back({e.path, e});
        return absl::OkStatus();
      }
      case DiffType::kFile: {
        int fd =
            openat(p, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) return ErrnoToStatus(absl::StrCat("create ", e.path));
        ScopedFd ffd(fd);
        DSEC_RETURN_IF_ERROR(ReceiveData(e, ffd.get()));
        DSEC_RETURN_IF_ERROR(SetFdMeta(e, ffd.get(), /*chmod_now=*/true));
        timespec ts[2] = {Ts(e.atime_ns), Ts(e.mtime_ns)};
        if (futimens(ffd.get(), ts) != 0) return ErrnoToStatus(absl::StrCat("utimens ", e.path));
        files_.insert(e.path);
        return absl::OkStatus();
      }
      case DiffType::kHardlink: {
        if (files_.count(e.link) == 0) {
          return Bad(e.path, "hard link to a path that is not an earlier non-directory entry");
        }
        auto [lparent, lname] = SplitParent(e.link);
        DSEC_ASSIGN_OR_RETURN(ScopedFd lfd, OpenDir(lparent));
        if (linkat(lfd.get(), lname.c_str(), p, name.c_str(), 0) != 0) {
          return ErrnoToStatus(absl::StrCat("link ", e.path));
        }
        ++stats_.hardlinks;
        files_.insert(e.path);
        return absl::OkStatus();
      }
      case DiffType::kSymlink:
        if (e.target.find('\0') != std::string::npos || e.target.size() > kMaxPathBytes) {
          return Bad(e.path, "invalid symlink target");
        }
        if (symlinkat(e.target.c_str(), p, name.c_str()) != 0) {
          return ErrnoToStatus(absl::StrCat("symlink ", e.path));
        }
        break;
      case DiffType::kWhiteout:
      case DiffType::kCharDev:
      case DiffType::kBlockDev:
      case DiffType::kFifo:
      case DiffType::kSocket: {
        mode_t fmt = S_IFIFO;
        dev_t dev = 0;
        if (e.type == DiffType::kWhiteout) {
          fmt = S_IFCHR;
          ++stats_.whiteouts;
        } else if (e.type == DiffType::kCharDev || e.type == DiffType::kBlockDev) {
          if (!options_.allow_device_nodes) return Bad(e.path, "device nodes are not allowed");
          fmt = e.type == DiffType::kCharDev ? S_IFCHR : S_IFBLK;
          dev = makedev(e.rdev_major, e.rdev_minor);
        } else if (e.type == DiffType::kSocket) {
          fmt = S_IFSOCK;
        }
        if (mknodat(p, name.c_str(), fmt | 0600, dev) != 0) {
          return ErrnoToStatus(absl::StrCat("mknod ", e.path));
        }
        break;
      }
    }
    // Symlinks and special files: no descriptor to hold; operate by name in
    // the parent we resolved (never following a final symlink).
    if (fchownat(p, name.c_str(), e.uid, e.gid, AT_SYMLINK_NOFOLLOW) != 0) {
      return ErrnoToStatus(absl::StrCat("chown ", e.path));
    }
    if (e.type != DiffType::kSymlink && fchmodat(p, name.c_str(), e.mode, 0) != 0) {
      return ErrnoToStatus(absl::StrCat("chmod ", e.path));
    }
    DSEC_RETURN_IF_ERROR(SetXattrs(e, -1, FdPath(p, name)));
    timespec ts[2] = {Ts(e.atime_ns), Ts(e.mtime_ns)};
    if (utimensat(p, name.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0) {
      return ErrnoToStatus(absl::StrCat("utimens ", e.path));
    }
    files_.insert(e.path);
    return absl::OkStatus();
  }

  absl::Status ReceiveData(const DiffEntry& e, int fd) {
    if (e.size > options_.max_data_bytes - std::min(options_.max_data_bytes, stats_.data_bytes)) {
      return absl::ResourceExhaustedError("pack_diff stream: data over the limit");
    }
    uint64_t got = 0;
    while (got < e.size) {
      DSEC_ASSIGN_OR_RETURN(Frame f, NextFrame());
      if (f.type != MsgType::kData) {
        return Bad(e.path, absl::StrCat("expected DATA, got ", TypeName(f.type)));
      }
      if (f.payload.empty() || f.payload.size() > e.size - got) {
        return Bad(e.path, "DATA does not match the announced size");
      }
      DSEC_RETURN_IF_ERROR(WriteAll(fd, f.payload));
      got += f.payload.size();
    }
    stats_.data_bytes += got;
    return absl::OkStatus();
  }

  absl::StatusOr<DiffStats> FinishDirs() {
    // Deepest first (reverse of pre-order), so setting a child's times does
    // not disturb its parent's afterwards.
    for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
      const DiffEntry& e = it->second;
      DSEC_ASSIGN_OR_RETURN(ScopedFd fd, OpenDir(it->first));
      if (fchmod(fd.get(), e.mode) != 0) return ErrnoToStatus(absl::StrCat("chmod ", e.path));
      timespec ts[2] = {Ts(e.atime_ns), Ts(e.mtime_ns)};
      if (futimens(fd.get(), ts) != 0) return ErrnoToStatus(absl::StrCat("utimens ", e.path));
    }
    return stats_;
  }

  FrameSource& source_;
  const MaterializeOptions& options_;
  ScopedFd dest_;
  DiffStats stats_;
  bool root_seen_ = false;
  std::vector<std::pair<std::string, DiffEntry>> dirs_;
  std::set<std::string> files_;  // non-directory paths created so far
};

}  // namespace

absl::StatusOr<DiffStats> MaterializeDiff(FrameSource& source, const std::string& dest_dir,
                                          const MaterializeOptions& options) {
  Materializer m(source, options);
  return m.Run(dest_dir);
}

}  // namespace dsec::agent
