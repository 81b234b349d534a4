// SPDX-License-Identifier: Apache-2.0
#include "sandbox/layers/pack_diff.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sandbox/layers/fs_util.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::layers {
namespace {

uint64_t MiB(uint64_t bytes) { return (bytes + (1u << 20) - 1) >> 20; }

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Copies [off, off + len) of `in` to the same place in `out`: in the
// kernel where it can (copy_file_range within a file system, sendfile
// across them: a sandbox's upper is on another file system than the
// store's staging directory), else through one buffer of what is left, at
// most 1 MiB, not zeroed (a zeroed 1 MiB per file was a third of a fork's
// CPU time: every one faulted in fresh and unmapped again).
absl::Status CopyRange(int in, int out, off_t off, off_t len, const std::string& what) {
  off_t in_off = off, out_off = off;
  while (len > 0) {
    ssize_t n = copy_file_range(in, &in_off, out, &out_off, static_cast<size_t>(len), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) break;
    if (n < 0) return ErrnoToStatus(absl::StrCat("copy_file_range ", what));
    if (n == 0) return absl::OkStatus();  // the file shrank: the frozen sandbox did not do it
    len -= n;
  }
  // sendfile writes at the output's file position.
  if (len > 0 && lseek(out, out_off, SEEK_SET) == out_off) {
    while (len > 0) {
      ssize_t n = sendfile(out, in, &in_off, static_cast<size_t>(std::min<off_t>(len, 1 << 30)));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) break;
      if (n < 0) return ErrnoToStatus(absl::StrCat("sendfile ", what));
      if (n == 0) return absl::OkStatus();
      out_off += n;
      len -= n;
    }
  }
  if (len <= 0) return absl::OkStatus();
  const size_t size = static_cast<size_t>(std::min<off_t>(len, 1 << 20));
  std::unique_ptr<char[]> buf(new char[size]);
  while (len > 0) {
    ssize_t n = pread(in, buf.get(), static_cast<size_t>(std::min<off_t>(len, static_cast<off_t>(size))), in_off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(absl::StrCat("read ", what));
    if (n == 0) return absl::OkStatus();
    for (ssize_t done = 0; done < n;) {
      ssize_t w = pwrite(out, buf.get() + done, static_cast<size_t>(n - done), out_off);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return ErrnoToStatus(absl::StrCat("write ", what));
      done += w;
      out_off += w;
    }
    in_off += n;
    len -= n;
  }
  return absl::OkStatus();
}

// Copies the data extents of `in` (SEEK_DATA/SEEK_HOLE) and sets the size:
// holes stay holes, so a sparse file costs the staging copy only its data.
absl::Status CopyData(int in, int out, off_t size, const std::string& what) {
  off_t off = 0;
  while (off < size) {
    off_t data = lseek(in, off, SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;  // only a hole is left
    if (data < 0) {
      // No SEEK_DATA here: the whole file is data.
      if (errno != EINVAL && errno != EOPNOTSUPP) return ErrnoToStatus(absl::StrCat("lseek ", what));
      data = off;
    }
    off_t hole = data < size ? lseek(in, data, SEEK_HOLE) : size;
    if (hole < 0) hole = size;
    hole = std::min(hole, size);
    DSEC_RETURN_IF_ERROR(CopyRange(in, out, data, hole - data, what));
    off = hole;
  }
  if (ftruncate(out, size) != 0) return ErrnoToStatus(absl::StrCat("ftruncate ", what));
  return absl::OkStatus();
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
        DSEC_RETURN_IF_ERROR(CopyData(in.get(), out.get(), st.st_size, src));
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
  // Before the copy: a bad spec or an oversized tree should not cost a
  // staging pass, nor leave one behind.
  DSEC_RETURN_IF_ERROR(ValidateCompressionSpec(request.compression));
  DiffLimits limits = options.limits;
  // Every full path made below (the upper's, the staged copy's, mkfs's)
  // stays within PATH_MAX: <root>/tmp/diff-XXXXXX/tree + path.
  const size_t prefix = std::max(upper.size(), store.root().size() + sizeof("/tmp/diff-XXXXXX/tree"));
  limits.max_path_bytes = std::min(limits.max_path_bytes, PATH_MAX - 1 > prefix ? PATH_MAX - 1 - prefix : 0);
  DSEC_ASSIGN_OR_RETURN(DiffSize size, ScanDiff(upper, limits));
  if (options.max_layer_bytes != 0 && size.image_bytes_estimate > options.max_layer_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the sandbox's changes make a layer of about ", MiB(size.image_bytes_estimate), " MiB (",
        MiB(size.content_bytes), " MiB in files, sparse ones counted whole), over this node's limit of ",
        MiB(options.max_layer_bytes), " MiB"));
  }
  struct statvfs fs;
  if (statvfs(store.root().c_str(), &fs) != 0) return ErrnoStatus("statvfs of the layer store");
  const uint64_t available = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  const uint64_t staged = size.allocated_bytes + size.directories * 4096;
  const uint64_t needed = staged + size.image_bytes_estimate + options.reserve_free_bytes;
  if (needed > available) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the layer store's disk has ", MiB(available), " MiB free; packing these changes needs about ",
        MiB(staged + size.image_bytes_estimate), " MiB and ", MiB(options.reserve_free_bytes),
        " MiB are kept free"));
  }
  request.max_image_bytes = options.max_layer_bytes;
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
