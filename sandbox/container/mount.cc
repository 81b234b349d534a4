// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/mount.h"

#include <fcntl.h>
#include <linux/loop.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::container {

namespace {

// fsopen + fsconfig(source, options) + CMD_CREATE + fsmount: a detached
// mount of `fstype`. `what` names it in errors; `*create_errno` (if given)
// gets the errno of a failed superblock creation, else 0.
absl::StatusOr<ScopedFd> FsMount(const char* fstype, const std::string& source,
                                 const std::vector<std::pair<std::string, std::string>>& options,
                                 unsigned attrs, const std::string& what,
                                 int* create_errno = nullptr) {
  if (create_errno != nullptr) *create_errno = 0;
  ScopedFd fs(::fsopen(fstype, FSOPEN_CLOEXEC));
  if (!fs) return ErrnoToStatus(absl::StrCat("fsopen ", fstype));
  if (!source.empty() &&
      ::fsconfig(fs.get(), FSCONFIG_SET_STRING, "source", source.c_str(), 0) != 0) {
    return ErrnoToStatus(absl::StrCat("fsconfig source ", what));
  }
  for (const auto& [key, value] : options) {
    // An empty value sets a flag ("noswap").
    const int rc = value.empty() ? ::fsconfig(fs.get(), FSCONFIG_SET_FLAG, key.c_str(), nullptr, 0)
                                 : ::fsconfig(fs.get(), FSCONFIG_SET_STRING, key.c_str(), value.c_str(), 0);
    if (rc != 0) {
      return ErrnoToStatus(absl::StrCat("fsconfig ", key, "=", value, " ", what));
    }
  }
  if (::fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    if (create_errno != nullptr) *create_errno = errno;
    return ErrnoToStatus(absl::StrCat("mount ", fstype, " ", what));
  }
  ScopedFd mnt(::fsmount(fs.get(), FSMOUNT_CLOEXEC, attrs));
  if (!mnt) return ErrnoToStatus(absl::StrCat("fsmount ", what));
  return mnt;
}

}  // namespace

absl::StatusOr<DetachedMount> DetachedMount::Erofs(const std::string& image) {
  const unsigned attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID;
  struct stat st;
  if (::stat(image.c_str(), &st) != 0) return ErrnoToStatus(absl::StrCat("layer ", image));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", image, " is not an image file"));
  }
  int create_errno = 0;
  auto file_backed = FsMount("erofs", image, {}, attrs, image, &create_errno);
  if (file_backed.ok()) return DetachedMount(std::move(*file_backed), false);
  // ENOTBLK: no file-backed EROFS (before 6.12): a loop device instead.
  // Anything else is a real error (bad image, missing file).
  if (create_errno != ENOTBLK) return file_backed.status();
  DSEC_ASSIGN_OR_RETURN(auto loop, AttachLoopDevice(image));
  auto on_loop = FsMount("erofs", loop.second, {}, attrs, image);
  if (!on_loop.ok()) {
    ::ioctl(loop.first.get(), LOOP_CLR_FD);
    return on_loop.status();
  }
  return DetachedMount(std::move(*on_loop), true);
}

absl::StatusOr<DetachedMount> DetachedMount::Tmpfs(
    uint64_t size_bytes, bool read_only, const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::pair<std::string, std::string>> options = {{"size", absl::StrCat(size_bytes)},
                                                               {"mode", "0755"}};
  options.insert(options.end(), extra.begin(), extra.end());
  DSEC_ASSIGN_OR_RETURN(
      ScopedFd fd, FsMount("tmpfs", "tmpfs", options,
                           MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID | (read_only ? MOUNT_ATTR_RDONLY : 0),
                           "detached tmpfs"));
  return DetachedMount(std::move(fd), false);
}

absl::StatusOr<DetachedMount> DetachedMount::Overlay(const std::vector<std::string>& lowers,
                                                     const std::string& upper,
                                                     const std::string& work) {
  DSEC_ASSIGN_OR_RETURN(std::string lowerdir, OverlayLowerDir(lowers));
  DSEC_ASSIGN_OR_RETURN(ScopedFd fd,
                        FsMount("overlay", "",
                                {{"lowerdir", lowerdir},
                                 {"upperdir", upper},
                                 {"workdir", work},
                                 {"index", "off"},
                                 {"xino", "off"}},
                                MOUNT_ATTR_NODEV, "overlay of " + upper));
  return DetachedMount(std::move(fd), false);
}

std::string DetachedMount::path() const { return absl::StrCat("/proc/self/fd/", fd_.get()); }

absl::StatusOr<ScopedFd> CloneSharedSysfs() {
  struct Shared {
    absl::Status status;
    ScopedFd sysfs;
    ScopedFd netns;  // keeps the namespace the sysfs shows alive
  };
  static const Shared* const shared = [] {
    auto* s = new Shared();
    // unshare(CLONE_NEWNET) moves only the calling thread: a thread of its
    // own, which ends once the mount is made.
    std::thread([s] {
      if (::unshare(CLONE_NEWNET) != 0) {
        s->status = ErrnoToStatus("shared sysfs: unshare(CLONE_NEWNET)");
        return;
      }
      s->netns = ScopedFd(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
      absl::StatusOr<ScopedFd> m =
          FsMount("sysfs", "sysfs", {}, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                  "shared sysfs");
      if (!m.ok()) {
        s->status = m.status();
        return;
      }
      s->sysfs = std::move(*m);
    }).join();
    if (!s->status.ok()) DSEC_LOG(info, "container: each sandbox mounts its own sysfs: {}", s->status.ToString());
    return s;
  }();
  if (!shared->status.ok()) return absl::UnavailableError(shared->status.message());
  ScopedFd clone(::open_tree(shared->sysfs.get(), "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
  if (!clone) return ErrnoToStatus("shared sysfs: open_tree");
  return clone;
}

bool OverlayAcceptsDetachedLayers() {
  static const bool accepted = [] {
    auto a = DetachedMount::Tmpfs(4096, true);
    auto b = DetachedMount::Tmpfs(4096, true);
    if (!a.ok() || !b.ok()) return false;
    // Two lowers and no upper: a read-only overlay, created and dropped
    // without being attached anywhere.
    ScopedFd fs(::fsopen("overlay", FSOPEN_CLOEXEC));
    if (!fs) return false;
    std::string lowers = absl::StrCat(a->path(), ":", b->path());
    if (::fsconfig(fs.get(), FSCONFIG_SET_STRING, "lowerdir", lowers.c_str(), 0) != 0) return false;
    bool ok = ::fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) == 0;
    DSEC_LOG(debug, "container: overlayfs {} layers on detached mounts", ok ? "takes" : "refuses");
    return ok;
  }();
  return accepted;
}

}  // namespace dsec::container
