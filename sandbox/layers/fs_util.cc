// SPDX-License-Identifier: Apache-2.0
#include "sandbox/layers/fs_util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::layers {

std::string JoinPath(const std::string& dir, const std::string& rel) {
  if (rel.empty()) return dir;
  if (!dir.empty() && dir.back() == '/') return dir + rel;
  return dir + "/" + rel;
}

absl::StatusOr<Xattrs> ListXattrs(const std::string& path) {
  Xattrs out;
  std::string names;
  for (;;) {
    ssize_t len = llistxattr(path.c_str(), nullptr, 0);
    if (len < 0) {
      if (errno == ENOTSUP) return out;
      return ErrnoStatus(absl::StrCat("llistxattr ", path));
    }
    names.resize(static_cast<size_t>(len));
    len = llistxattr(path.c_str(), names.data(), names.size());
    if (len < 0 && errno == ERANGE) continue;  // grew in between
    if (len < 0) return ErrnoStatus(absl::StrCat("llistxattr ", path));
    names.resize(static_cast<size_t>(len));
    break;
  }
  size_t pos = 0;
  while (pos < names.size()) {
    std::string name = names.c_str() + pos;
    pos += name.size() + 1;
    if (name.empty()) continue;
    std::string value;
    for (;;) {
      ssize_t vlen = lgetxattr(path.c_str(), name.c_str(), nullptr, 0);
      if (vlen < 0 && errno == ENODATA) break;  // removed in between
      if (vlen < 0) return ErrnoStatus(absl::StrCat("lgetxattr ", path, " ", name));
      value.resize(static_cast<size_t>(vlen));
      vlen = lgetxattr(path.c_str(), name.c_str(), value.data(), value.size());
      if (vlen < 0 && errno == ERANGE) continue;
      if (vlen < 0) return ErrnoStatus(absl::StrCat("lgetxattr ", path, " ", name));
      value.resize(static_cast<size_t>(vlen));
      out.emplace_back(std::move(name), std::move(value));
      break;
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// Directories on another device are mount points: refuse rather than empty
// someone's mounted filesystem. (Non-directories are not checked: overlayfs
// reports the underlying layer's device for them.)
absl::Status RemoveBelow(const std::string& path, dev_t root_dev) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(absl::StrCat("lstat ", path));
  }
  if (S_ISDIR(st.st_mode)) {
    if (st.st_dev != root_dev) {
      return absl::FailedPreconditionError(absl::StrCat("remove tree: ", path, " is a mount point"));
    }
    DSEC_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDirectory(path));
    for (const auto& n : names) DSEC_RETURN_IF_ERROR(RemoveBelow(JoinPath(path, n), root_dev));
    if (rmdir(path.c_str()) != 0 && errno != ENOENT) return ErrnoToStatus(absl::StrCat("rmdir ", path));
    return absl::OkStatus();
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoToStatus(absl::StrCat("unlink ", path));
  return absl::OkStatus();
}

}  // namespace

absl::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(absl::StrCat("lstat ", path));
  }
  return RemoveBelow(path, st.st_dev);
}

absl::Status WriteFileAtomic(const std::string& path, const std::string& content) {
  std::string tmp = path + ".tmp.XXXXXX";
  int raw = mkostemp(tmp.data(), O_CLOEXEC);
  if (raw < 0) return ErrnoToStatus(absl::StrCat("mkostemp ", tmp));
  ScopedFd fd(raw);
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = write(fd.get(), content.data() + off, content.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status s = ErrnoToStatus(absl::StrCat("write ", tmp));
      unlink(tmp.c_str());
      return s;
    }
    off += static_cast<size_t>(n);
  }
  if (fchmod(fd.get(), 0644) != 0 || fsync(fd.get()) != 0) {
    absl::Status s = ErrnoToStatus(absl::StrCat("fsync ", tmp));
    unlink(tmp.c_str());
    return s;
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = ErrnoToStatus(absl::StrCat("rename ", tmp, " -> ", path));
    unlink(tmp.c_str());
    return s;
  }
  std::string dir = path.substr(0, path.find_last_of('/') + 1);
  ScopedFd dfd(open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.valid()) fsync(dfd.get());
  return absl::OkStatus();
}

absl::StatusOr<std::string> MakeTempDir(const std::string& parent, const std::string& prefix) {
  std::string tmpl = JoinPath(parent, prefix + "XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) return ErrnoToStatus(absl::StrCat("mkdtemp ", tmpl));
  return tmpl;
}

}  // namespace dsec::layers
