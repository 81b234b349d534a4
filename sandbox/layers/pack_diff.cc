// SPDX-License-Identifier: Apache-2.0
#include "sandbox/layers/pack_diff.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sandbox/layers/fs_util.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::layers {
namespace {

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

absl::Status CopyData(int in, int out, const std::string& what) {
  bool use_copy_file_range = true;
  std::vector<char> buf;
  for (;;) {
    if (use_copy_file_range) {
      ssize_t n = copy_file_range(in, nullptr, out, nullptr, 1 << 30, 0);
      if (n > 0) continue;
      if (n == 0) return absl::OkStatus();
      if (errno == EINTR) continue;
      if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
        return ErrnoToStatus(absl::StrCat("copy_file_range ", what));
      }
      use_copy_file_range = false;  // nothing copied yet on these errors
      buf.resize(1 << 20);
    }
    ssize_t n = read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(absl::StrCat("read ", what));
    if (n == 0) return absl::OkStatus();
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(out, buf.data() + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return ErrnoToStatus(absl::StrCat("write ", what));
      off += w;
    }
  }
}

class DiffStager {
 public:
  explicit DiffStager(const PackDiffOptions& options) : options_(options) {}

  absl::Status Stage(const std::string& src, const std::string& dst) {
    struct stat st;
    if (lstat(src.c_str(), &st) != 0) return ErrnoToStatus(absl::StrCat("lstat ", src));
    DSEC_ASSIGN_OR_RETURN(Xattrs raw, ListXattrs(src));
    bool xwhiteout = false;
    DSEC_ASSIGN_OR_RETURN(Xattrs xattrs, Translate(src, raw, &xwhiteout));
    switch (st.st_mode & S_IFMT) {
      case S_IFDIR: {
        if (mkdir(dst.c_str(), 0700) != 0) return ErrnoToStatus(absl::StrCat("mkdir ", dst));
        DSEC_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDirectory(src));
        for (const auto& n : names) DSEC_RETURN_IF_ERROR(Stage(JoinPath(src, n), JoinPath(dst, n)));
        break;
      }
      case S_IFREG: {
        if (xwhiteout && st.st_size == 0) {
          // The xattr form of a whiteout; the device form is what every
          // overlayfs version reads in a lower layer.
          if (mknod(dst.c_str(), S_IFCHR | 0000, makedev(0, 0)) != 0) {
            return ErrnoToStatus(absl::StrCat("mknod whiteout ", dst));
          }
          xattrs.clear();
          break;
        }
        if (st.st_nlink > 1) {
          auto [it, first] = links_.try_emplace({st.st_dev, st.st_ino}, dst);
          if (!first) {
            if (link(it->second.c_str(), dst.c_str()) != 0) {
              return ErrnoToStatus(absl::StrCat("link ", it->second, " -> ", dst));
            }
            return absl::OkStatus();  // the first name carries the metadata
          }
        }
        ScopedFd in(open(src.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
        if (!in.valid()) return ErrnoToStatus(absl::StrCat("open ", src));
        ScopedFd out(open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (!out.valid()) return ErrnoToStatus(absl::StrCat("create ", dst));
        DSEC_RETURN_IF_ERROR(CopyData(in.get(), out.get(), src));
        break;
      }
      case S_IFLNK: {
        std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
        ssize_t n = readlink(src.c_str(), target.data(), target.size());
        if (n < 0) return ErrnoToStatus(absl::StrCat("readlink ", src));
        target.resize(static_cast<size_t>(n));
        if (symlink(target.c_str(), dst.c_str()) != 0) {
          return ErrnoToStatus(absl::StrCat("symlink ", dst));
        }
        break;
      }
      default:  // whiteouts (0/0 char devices), other devices, fifos, sockets
        if (mknod(dst.c_str(), st.st_mode, st.st_rdev) != 0) {
          return ErrnoToStatus(absl::StrCat("mknod ", dst));
        }
        break;
    }
    return ApplyMetadata(dst, st, xattrs);
  }

 private:
  // Owner before mode (chown clears set-id bits) and xattrs after both
  // (chown clears security.capability); times last.
  absl::Status ApplyMetadata(const std::string& dst, const struct stat& st, const Xattrs& xattrs) {
    if (lchown(dst.c_str(), st.st_uid, st.st_gid) != 0) {
      return ErrnoToStatus(absl::StrCat("lchown ", dst));
    }
    if (!S_ISLNK(st.st_mode) && chmod(dst.c_str(), st.st_mode & 07777) != 0) {
      return ErrnoToStatus(absl::StrCat("chmod ", dst));
    }
    for (const auto& [name, value] : xattrs) {
      if (lsetxattr(dst.c_str(), name.c_str(), value.data(), value.size(), 0) != 0) {
        return ErrnoToStatus(absl::StrCat("lsetxattr ", dst, " ", name));
      }
    }
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    if (utimensat(AT_FDCWD, dst.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) {
      return ErrnoToStatus(absl::StrCat("utimensat ", dst));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Xattrs> Translate(const std::string& src, const Xattrs& raw, bool* xwhiteout) {
    Xattrs out;
    const std::string& in_prefix = options_.upper_xattr_prefix;
    for (const auto& [name, value] : raw) {
      if (!StartsWith(name, in_prefix)) {
        out.emplace_back(name, value);
        continue;
      }
      std::string key = name.substr(in_prefix.size());
      if (StartsWith(key, "overlay.")) {
        // An escaped xattr of the user's own in the overlay namespace; a
        // lower layer carries it in the same escaped form.
        out.emplace_back(options_.lower_xattr_prefix + key, value);
      } else if (key == "opaque") {
        out.emplace_back(options_.lower_xattr_prefix + key, value);
      } else if (key == "whiteout") {
        *xwhiteout = true;
      } else if (key == "redirect" || key == "metacopy") {
        return absl::FailedPreconditionError(absl::StrCat(
            src, " has ", name, ": the upper directory was made with redirect_dir or metacopy, "
            "whose data lives in the lower layers; mount with redirect_dir=off,metacopy=off"));
      }
      // origin, impure, nlink, upper, uuid, ...: bookkeeping of the old mount.
    }
    return out;
  }

  const PackDiffOptions& options_;
  std::map<std::pair<dev_t, ino_t>, std::string> links_;
};

}  // namespace

absl::Status StageDiff(const std::string& upper, const std::string& staging,
                       const PackDiffOptions& options) {
  struct stat st;
  if (lstat(upper.c_str(), &st) != 0) return ErrnoToStatus(absl::StrCat("lstat ", upper));
  if (!S_ISDIR(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(upper, " is not a directory"));
  for (const std::string* p : {&options.upper_xattr_prefix, &options.lower_xattr_prefix}) {
    if (*p != "trusted.overlay." && *p != "user.overlay.") {
      return absl::InvalidArgumentError(absl::StrCat("overlay xattr prefix '", *p,
                                                     "' is neither trusted.overlay. nor user.overlay."));
    }
  }
  DiffStager stager(options);
  return stager.Stage(upper, staging);
}

absl::StatusOr<BuildResult> PackDiff(LayerStore& store, const std::string& upper, BuildRequest request,
                                     const PackDiffOptions& options) {
  // Before the copy: a bad spec should not cost a staging pass.
  DSEC_RETURN_IF_ERROR(ValidateCompressionSpec(request.compression));
  DSEC_ASSIGN_OR_RETURN(std::string dir, MakeTempDir(JoinPath(store.root(), "tmp"), "diff-"));
  absl::StatusOr<BuildResult> result = [&]() -> absl::StatusOr<BuildResult> {
    // Held while staging so that LayerStore::Gc leaves this directory alone.
    ScopedFd lock(open(JoinPath(dir, "lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!lock.valid() || flock(lock.get(), LOCK_EX) != 0) return ErrnoStatus("lock " + dir);
    std::string tree = JoinPath(dir, "tree");
    DSEC_RETURN_IF_ERROR(StageDiff(upper, tree, options));
    if (request.source.empty()) request.source = "pack_diff:" + upper;
    return store.Build(tree, request);
  }();
  absl::Status cleanup = RemoveTree(dir);
  if (result.ok() && !cleanup.ok()) return cleanup;
  return result;
}

}  // namespace dsec::layers
