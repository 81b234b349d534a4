// SPDX-License-Identifier: Apache-2.0
// Agent side of pack_diff: SendDiff walks the upper directory.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "guest-kernel/agent/pack_diff_stream.h"
#include "guest-kernel/agent/sys_util.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::agent {

namespace {

// Deeper trees than this are refused rather than recursed into.
constexpr int kMaxDepth = 1024;

int64_t Ns(const timespec& t) { return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec; }

class Walker {
 public:
  Walker(const std::string& upper, FrameSink& sink) : upper_(upper), sink_(sink) {}

  absl::StatusOr<DiffStats> Run() {
    struct stat st;
    // "/." so that a /proc/self/fd/N path is followed to the directory.
    if (lstat((upper_ + "/.").c_str(), &st) != 0) {
      return ErrnoToStatus(absl::StrCat("stat ", upper_));
    }
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat("upper ", upper_, " is not a directory"));
    }
    DSEC_RETURN_IF_ERROR(SendEntry(".", upper_ + "/.", st));
    DSEC_RETURN_IF_ERROR(WalkDir("", 0));
    DiffEnd end;
    end.entries = stats_.entries;
    end.data_bytes = stats_.data_bytes;
    DSEC_RETURN_IF_ERROR(sink_.SendFrame(ToFrame(end)));
    return stats_;
  }

 private:
  std::string Full(const std::string& rel) const {
    return rel.empty() ? upper_ : upper_ + "/" + rel;
  }

  absl::Status WalkDir(const std::string& rel, int depth) {
    if (depth > kMaxDepth) {
      return absl::ResourceExhaustedError(absl::StrCat("pack_diff: tree deeper than ", kMaxDepth));
    }
    // "/." follows a /proc/self/fd/N upper to its directory.
    std::string dir_path = rel.empty() ? upper_ + "/." : Full(rel);
    int fd = open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(absl::StrCat("open ", dir_path));
    DIR* dir = fdopendir(fd);
    if (dir == nullptr) {
      ScopedFd close_it(fd);
      return ErrnoStatus(absl::StrCat("fdopendir ", dir_path));
    }
    std::vector<std::string> names;
    errno = 0;
    while (dirent* d = readdir(dir)) {
      std::string_view n(d->d_name);
      if (n == "." || n == "..") continue;
      names.emplace_back(n);
    }
    int read_errno = errno;
    closedir(dir);  // closes fd
    if (read_errno != 0) return ErrnoStatus(absl::StrCat("readdir ", dir_path), read_errno);
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      std::string child = rel.empty() ? name : rel + "/" + name;
      std::string full = Full(child);
      struct stat st;
      if (lstat(full.c_str(), &st) != 0) {
        if (errno == ENOENT) continue;  // removed meanwhile
        return ErrnoToStatus(absl::StrCat("stat ", full));
      }
      DSEC_RETURN_IF_ERROR(SendEntry(child, full, st));
      if (S_ISDIR(st.st_mode)) DSEC_RETURN_IF_ERROR(WalkDir(child, depth + 1));
    }
    return absl::OkStatus();
  }

  absl::Status SendEntry(const std::string& rel, const std::string& full, const struct stat& st) {
    DiffEntry e;
    e.path = rel;
    e.mode = st.st_mode & 07777;
    e.uid = st.st_uid;
    e.gid = st.st_gid;
    e.mtime_ns = Ns(st.st_mtim);
    e.atime_ns = Ns(st.st_atim);
    ++stats_.entries;
    if (!S_ISDIR(st.st_mode) && st.st_nlink > 1) {
      auto key = std::make_pair(st.st_dev, st.st_ino);
      auto it = first_name_.find(key);
      if (it != first_name_.end()) {
        e.type = DiffType::kHardlink;
        e.link = it->second;
        ++stats_.hardlinks;
        return sink_.SendFrame(ToFrame(e));
      }
      first_name_.emplace(key, rel);
    }
    DSEC_ASSIGN_OR_RETURN(std::vector<XattrPair> xattrs, ListXattrs(full));
    for (XattrPair& x : xattrs) {
      if (S_ISDIR(st.st_mode) &&
          (x.name == "trusted.overlay.opaque" || x.name == "user.overlay.opaque") &&
          x.value == "y") {
        e.opaque = true;
      }
      e.xattrs.push_back({std::move(x.name), std::move(x.value)});
    }
    switch (st.st_mode & S_IFMT) {
      case S_IFDIR:
        e.type = DiffType::kDir;
        break;
      case S_IFLNK: {
        e.type = DiffType::kSymlink;
        std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
        for (;;) {
          ssize_t n = readlink(full.c_str(), target.data(), target.size());
          if (n < 0) return ErrnoToStatus(absl::StrCat("readlink ", full));
          if (static_cast<size_t>(n) < target.size()) {
            target.resize(static_cast<size_t>(n));
            break;
          }
          target.resize(target.size() * 2);  // grew meanwhile
        }
        e.target = std::move(target);
        break;
      }
      case S_IFCHR:
        if (st.st_rdev == 0) {
          e.type = DiffType::kWhiteout;
          ++stats_.whiteouts;
        } else {
          e.type = DiffType::kCharDev;
        }
        break;
      case S_IFBLK:
        e.type = DiffType::kBlockDev;
        break;
      case S_IFIFO:
        e.type = DiffType::kFifo;
        break;
      case S_IFSOCK:
        e.type = DiffType::kSocket;
        break;
      case S_IFREG:
        e.type = DiffType::kFile;
        break;
      default:
        return absl::InternalError(absl::StrCat("pack_diff: unknown file type of ", full));
    }
    if (e.type == DiffType::kCharDev || e.type == DiffType::kBlockDev) {
      e.rdev_major = major(st.st_rdev);
      e.rdev_minor = minor(st.st_rdev);
    }
    if (e.type != DiffType::kFile) return sink_.SendFrame(ToFrame(e));
    // Open before announcing the size, so the announcement matches what we
    // can read.
    int fd = open(full.c_str(), O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(absl::StrCat("open ", full));
    ScopedFd ffd(fd);
    struct stat fst;
    if (fstat(fd, &fst) != 0) return ErrnoStatus("fstat");
    e.size = static_cast<uint64_t>(fst.st_size);
    DSEC_RETURN_IF_ERROR(sink_.SendFrame(ToFrame(e)));
    return SendData(full, fd, e.size);
  }

  absl::Status SendData(const std::string& full, int fd, uint64_t size) {
    std::string buf(kDataChunkBytes, '\0');
    uint64_t sent = 0;
    bool short_file = false;
    while (sent < size) {
      size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - sent));
      ssize_t n = 0;
      if (!short_file) {
        n = read(fd, buf.data(), want);
        if (n < 0) {
          if (errno == EINTR) continue;
          return ErrnoToStatus(absl::StrCat("read ", full));
        }
      }
      if (n == 0) {
        // Shrank while we read it: keep the announced size.
        if (!short_file) DSEC_LOG(warn, "pack_diff: {} shrank while being read; padding", full);
        short_file = true;
        std::fill(buf.begin(), buf.begin() + static_cast<ptrdiff_t>(want), '\0');
        n = static_cast<ssize_t>(want);
      }
      DSEC_RETURN_IF_ERROR(sink_.SendFrame(
          DataFrame(MsgType::kData, std::string_view(buf.data(), static_cast<size_t>(n)))));
      sent += static_cast<uint64_t>(n);
    }
    stats_.data_bytes += sent;
    return absl::OkStatus();
  }

  const std::string upper_;
  FrameSink& sink_;
  DiffStats stats_;
  std::map<std::pair<dev_t, ino_t>, std::string> first_name_;
};

}  // namespace

absl::StatusOr<DiffStats> SendDiff(const std::string& upper, FrameSink& sink) {
  Walker w(upper, sink);
  return w.Run();
}

}  // namespace dsec::agent
