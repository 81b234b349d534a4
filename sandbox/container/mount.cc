// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/mount.h"

#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/file_io.h"
#include "base/logging.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::container {

namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
      continue;
    }
    out += s[i];
  }
  return out;
}

// Attaches `image` read-only to a free loop device with autoclear set and
// returns the open device (the caller mounts it, then closes the fd: the
// device detaches when the last mount goes).
absl::StatusOr<std::pair<ScopedFd, std::string>> AttachLoop(const std::string& image) {
  ScopedFd backing(::open(image.c_str(), O_RDONLY | O_CLOEXEC));
  if (!backing) return ErrnoToStatus(absl::StrCat("open ", image));
  ScopedFd control(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!control) return ErrnoToStatus("open /dev/loop-control");
  // Another process may take the free device between GET_FREE and
  // CONFIGURE (EBUSY): try again a bounded number of times.
  for (int attempt = 0; attempt < 16; ++attempt) {
    int n = ::ioctl(control.get(), LOOP_CTL_GET_FREE);
    if (n < 0) return ErrnoToStatus("LOOP_CTL_GET_FREE");
    std::string dev = absl::StrCat("/dev/loop", n);
    ScopedFd loop(::open(dev.c_str(), O_RDONLY | O_CLOEXEC));
    if (!loop) return ErrnoToStatus(absl::StrCat("open ", dev));
    loop_config config{};
    config.fd = static_cast<uint32_t>(backing.get());
    config.info.lo_flags = LO_FLAGS_READ_ONLY | LO_FLAGS_AUTOCLEAR;
    if (::ioctl(loop.get(), LOOP_CONFIGURE, &config) == 0) {
      return std::make_pair(std::move(loop), dev);
    }
    if (errno != EBUSY) return ErrnoToStatus(absl::StrCat("LOOP_CONFIGURE ", dev));
  }
  return absl::ResourceExhaustedError("no free loop device after 16 attempts");
}

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
    if (::fsconfig(fs.get(), FSCONFIG_SET_STRING, key.c_str(), value.c_str(), 0) != 0) {
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

// overlayfs's lowerdir: `lowers` bottom first, named top first and
// ':'-joined; a directory with ',' or ':' cannot be named there.
absl::StatusOr<std::string> LowerDirOption(const std::vector<std::string>& lowers) {
  if (lowers.empty()) return absl::InvalidArgumentError("overlay needs at least one lower layer");
  for (const std::string& dir : lowers) {
    if (dir.find_first_of(",:") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("overlay lower has ',' or ':': ", dir));
    }
  }
  return absl::StrJoin(lowers.rbegin(), lowers.rend(), ":");
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
  DSEC_ASSIGN_OR_RETURN(auto loop, AttachLoop(image));
  auto on_loop = FsMount("erofs", loop.second, {}, attrs, image);
  if (!on_loop.ok()) {
    ::ioctl(loop.first.get(), LOOP_CLR_FD);
    return on_loop.status();
  }
  return DetachedMount(std::move(*on_loop), true);
}

absl::StatusOr<DetachedMount> DetachedMount::Tmpfs(uint64_t size_bytes, bool read_only) {
  DSEC_ASSIGN_OR_RETURN(
      ScopedFd fd, FsMount("tmpfs", "tmpfs", {{"size", absl::StrCat(size_bytes)}, {"mode", "0755"}},
                           MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID | (read_only ? MOUNT_ATTR_RDONLY : 0),
                           "detached tmpfs"));
  return DetachedMount(std::move(fd), false);
}

absl::StatusOr<DetachedMount> DetachedMount::Overlay(const std::vector<std::string>& lowers,
                                                     const std::string& upper,
                                                     const std::string& work) {
  DSEC_ASSIGN_OR_RETURN(std::string lowerdir, LowerDirOption(lowers));
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

Mount::Mount(Mount&& other) noexcept
    : target_(std::exchange(other.target_, std::string())), loop_(other.loop_) {}

Mount& Mount::operator=(Mount&& other) noexcept {
  if (this != &other) {
    if (absl::Status s = Unmount(); !s.ok()) DSEC_LOG(warn, "container: {}", s.ToString());
    target_ = std::exchange(other.target_, std::string());
    loop_ = other.loop_;
  }
  return *this;
}

Mount::~Mount() {
  if (absl::Status s = Unmount(); !s.ok()) DSEC_LOG(warn, "container: {}", s.ToString());
}

absl::StatusOr<Mount> Mount::Create(const std::string& source, const std::string& target,
                                    const std::string& fstype, unsigned long flags,
                                    const std::string& data) {
  if (::mount(source.c_str(), target.c_str(), fstype.c_str(), flags,
              data.empty() ? nullptr : data.c_str()) != 0) {
    return ErrnoToStatus(absl::StrCat("mount ", fstype, " ", source, " on ", target));
  }
  return Mount(target, false);
}

absl::StatusOr<Mount> Mount::Erofs(const std::string& image, const std::string& target) {
  const unsigned long flags = MS_RDONLY | MS_NODEV | MS_NOSUID;
  if (::mount(image.c_str(), target.c_str(), "erofs", flags, nullptr) == 0) {
    return Mount(target, false);
  }
  // ENOTBLK: a kernel without file-backed EROFS (before 6.12) wants a block
  // device. Anything else is a real error (bad image, missing file).
  if (errno != ENOTBLK) return ErrnoToStatus(absl::StrCat("mount erofs ", image, " on ", target));
  DSEC_ASSIGN_OR_RETURN(auto loop, AttachLoop(image));
  if (::mount(loop.second.c_str(), target.c_str(), "erofs", flags, nullptr) != 0) {
    absl::Status s = ErrnoToStatus(absl::StrCat("mount erofs ", loop.second, " on ", target));
    ::ioctl(loop.first.get(), LOOP_CLR_FD);
    return s;
  }
  return Mount(target, true);
}

absl::StatusOr<Mount> Mount::Tmpfs(const std::string& target, uint64_t size_bytes) {
  return Create("tmpfs", target, "tmpfs", MS_NODEV | MS_NOSUID,
                absl::StrCat("size=", size_bytes, ",mode=0755"));
}

absl::StatusOr<std::string> Mount::OverlayData(const std::vector<std::string>& lowers,
                                               const std::string& upper,
                                               const std::string& work) {
  DSEC_ASSIGN_OR_RETURN(std::string lowerdir, LowerDirOption(lowers));
  // index/xino off: the same lower layers back many overlays at once, and
  // neither feature is needed for a private upper.
  return absl::StrCat("lowerdir=", lowerdir, ",upperdir=", upper,
                      ",workdir=", work, ",index=off,xino=off");
}

absl::StatusOr<Mount> Mount::Overlay(const std::vector<std::string>& lowers,
                                     const std::string& upper, const std::string& work,
                                     const std::string& target) {
  DSEC_ASSIGN_OR_RETURN(std::string data, OverlayData(lowers, upper, work));
  return Create("overlay", target, "overlay", MS_NODEV, data);
}

absl::StatusOr<Mount> Mount::Idmapped(const std::string& source, int userns_fd,
                                      const std::string& target) {
  ScopedFd tree(::open_tree(AT_FDCWD, source.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (!tree) return ErrnoToStatus(absl::StrCat("open_tree ", source));
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_IDMAP;
  attr.userns_fd = static_cast<uint64_t>(userns_fd);
  if (::mount_setattr(tree.get(), "", AT_EMPTY_PATH, &attr, sizeof(attr)) != 0) {
    return ErrnoToStatus(absl::StrCat("idmap the mount of ", source));
  }
  if (::move_mount(tree.get(), "", AT_FDCWD, target.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    return ErrnoToStatus(absl::StrCat("attach the idmapped ", source, " at ", target));
  }
  return Mount(target, false);
}

absl::Status Mount::Unmount() {
  if (target_.empty()) return absl::OkStatus();
  std::string target = std::exchange(target_, std::string());
  if (::umount2(target.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT) {
    return ErrnoToStatus(absl::StrCat("umount ", target));
  }
  return absl::OkStatus();
}

std::vector<std::string> ParseMountPoints(std::string_view mountinfo) {
  std::vector<std::string> points;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(mountinfo.data(), mountinfo.size()), '\n',
                      absl::SkipEmpty())) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
    if (fields.size() >= 5) points.push_back(Unescape(fields[4]));
  }
  return points;
}

absl::StatusOr<int> UnmountBelow(const std::string& dir) {
  int count = 0;
  // Mounts stacked on one point come off one at a time; every pass removes
  // at least one or stops.
  for (int pass = 0; pass < 64; ++pass) {
    DSEC_ASSIGN_OR_RETURN(std::string info, dsec::ReadSmallFile("/proc/self/mountinfo"));
    std::vector<std::string> hits;
    for (std::string& p : ParseMountPoints(info)) {
      if (p == dir || absl::StartsWith(p, absl::StrCat(dir, "/"))) hits.push_back(std::move(p));
    }
    if (hits.empty()) return count;
    std::sort(hits.begin(), hits.end(),
              [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    bool progress = false;
    for (const std::string& p : hits) {
      if (::umount2(p.c_str(), MNT_DETACH) == 0) {
        ++count;
        progress = true;
      }
    }
    if (!progress) return ErrnoToStatus(absl::StrCat("umount ", hits.front()));
  }
  return count;
}

}  // namespace dsec::container
