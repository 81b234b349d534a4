// SPDX-License-Identifier: Apache-2.0
#include "sandbox/layers/tree_digest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sandbox/layers/fs_util.h"
#include "base/little_endian.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::layers {
namespace {

// Serialisation format version; bump when the record layout changes.
constexpr std::string_view kFormat = "dsec-vmm tree digest v1";

class TreeHasher {
 public:
  explicit TreeHasher(std::string root) : root_(std::move(root)) {}

  absl::Status Walk(const std::string& rel) {
    std::string path = JoinPath(root_, rel);
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) return ErrnoToStatus(absl::StrCat("lstat ", path));
    if (st.st_mtim.tv_sec > stats_.max_mtime_sec) stats_.max_mtime_sec = st.st_mtim.tv_sec;
    Tag('E');
    Field(rel);
    U64(st.st_mode);
    U64(st.st_uid);
    U64(st.st_gid);
    DSEC_ASSIGN_OR_RETURN(Xattrs xattrs, ListXattrs(path));
    U64(xattrs.size());
    for (const auto& [name, value] : xattrs) {
      Field(name);
      Field(value);
    }
    switch (st.st_mode & S_IFMT) {
      case S_IFDIR: {
        stats_.directories++;
        Tag('d');
        DSEC_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDirectory(path));
        for (const auto& name : names) {
          DSEC_RETURN_IF_ERROR(Walk(rel.empty() ? name : rel + "/" + name));
        }
        Tag(')');  // end of directory: keeps "a/b" + "c" apart from "a/b/c"
        return absl::OkStatus();
      }
      case S_IFREG: {
        if (st.st_nlink > 1) {
          auto [it, inserted] = first_link_.try_emplace({st.st_dev, st.st_ino}, rel);
          if (!inserted) {
            Tag('H');
            Field(it->second);
            return absl::OkStatus();
          }
        }
        stats_.regular_files++;
        stats_.content_bytes += static_cast<uint64_t>(st.st_size);
        Tag('F');
        return HashContent(path);
      }
      case S_IFLNK: {
        stats_.other_entries++;
        std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
        ssize_t n = readlink(path.c_str(), target.data(), target.size());
        if (n < 0) return ErrnoToStatus(absl::StrCat("readlink ", path));
        target.resize(static_cast<size_t>(n));
        Tag('L');
        Field(target);
        return absl::OkStatus();
      }
      case S_IFCHR:
      case S_IFBLK:
        stats_.other_entries++;
        Tag('D');
        U64(major(st.st_rdev));
        U64(minor(st.st_rdev));
        return absl::OkStatus();
      default:  // fifo, socket: type and mode say it all
        stats_.other_entries++;
        Tag('O');
        return absl::OkStatus();
    }
  }

  void Parent(const std::string& digest) {
    Tag('P');
    Field(digest);
  }

  TreeDigest Finish() {
    TreeDigest out;
    out.digest = hash_.Finish();
    out.stats = stats_;
    return out;
  }

  void Begin() { Field(kFormat); }

 private:
  absl::Status HashContent(const std::string& path) {
    ScopedFd fd(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid()) return ErrnoToStatus(absl::StrCat("open ", path));
    Sha256 content;
    uint64_t size = 0;
    // 64 KiB, not zeroed, once per walk: below malloc's mmap threshold, so
    // a walk of a few small files (a fork's pack) does not fault in and
    // unmap a fresh zeroed megabyte.
    if (!buffer_) buffer_.reset(new char[kBufferBytes]);
    for (;;) {
      ssize_t n = read(fd.get(), buffer_.get(), kBufferBytes);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus(absl::StrCat("read ", path));
      if (n == 0) break;
      content.Update(buffer_.get(), static_cast<size_t>(n));
      size += static_cast<uint64_t>(n);
    }
    Sha256Digest d = content.Finish();
    U64(size);
    hash_.Update(d.data(), d.size());
    return absl::OkStatus();
  }

  void Tag(char t) { hash_.Update(&t, 1); }
  void U64(uint64_t v) {
    uint8_t b[8];
    StoreLe64(b, v);
    hash_.Update(b, sizeof(b));
  }
  void Field(std::string_view s) {
    U64(s.size());
    hash_.Update(s);
  }

  const std::string root_;
  Sha256 hash_;
  TreeStats stats_;
  std::map<std::pair<dev_t, ino_t>, std::string> first_link_;
  static constexpr size_t kBufferBytes = 64 << 10;
  std::unique_ptr<char[]> buffer_;
};

}  // namespace

absl::StatusOr<TreeDigest> DigestTree(const std::string& root,
                                      const std::vector<std::string>& parents) {
  struct stat st;
  if (lstat(root.c_str(), &st) != 0) return ErrnoToStatus(absl::StrCat("lstat ", root));
  if (!S_ISDIR(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(root, " is not a directory"));
  TreeHasher hasher(root);
  hasher.Begin();
  DSEC_RETURN_IF_ERROR(hasher.Walk(""));
  for (const auto& p : parents) hasher.Parent(p);
  return hasher.Finish();
}

}  // namespace dsec::layers
