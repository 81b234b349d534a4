// SPDX-License-Identifier: Apache-2.0
#include "base/mount.h"

#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/file_io.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec {

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

}  // namespace

absl::StatusOr<std::pair<ScopedFd, std::string>> AttachLoopDevice(const std::string& image) {
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

absl::StatusOr<std::string> OverlayLowerDir(const std::vector<std::string>& lowers) {
  if (lowers.empty()) return absl::InvalidArgumentError("overlay needs at least one lower layer");
  for (const std::string& dir : lowers) {
    if (dir.find_first_of(",:") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("overlay lower has ',' or ':': ", dir));
    }
  }
  return absl::StrJoin(lowers.rbegin(), lowers.rend(), ":");
}

Mount::Mount(Mount&& other) noexcept
    : target_(std::exchange(other.target_, std::string())), loop_(other.loop_) {}

Mount& Mount::operator=(Mount&& other) noexcept {
  if (this != &other) {
    if (absl::Status s = Unmount(); !s.ok()) DSEC_LOG(warn, "mount: {}", s.ToString());
    target_ = std::exchange(other.target_, std::string());
    loop_ = other.loop_;
  }
  return *this;
}

Mount::~Mount() {
  if (absl::Status s = Unmount(); !s.ok()) DSEC_LOG(warn, "mount: {}", s.ToString());
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
  DSEC_ASSIGN_OR_RETURN(auto loop, AttachLoopDevice(image));
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
  DSEC_ASSIGN_OR_RETURN(std::string lowerdir, OverlayLowerDir(lowers));
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

absl::StatusOr<std::vector<std::string>> MountPointsBelow(const std::string& dir) {
  DSEC_ASSIGN_OR_RETURN(std::string info, ReadSmallFile("/proc/self/mountinfo"));
  std::vector<std::string> hits;
  for (std::string& p : ParseMountPoints(info)) {
    if (p == dir || absl::StartsWith(p, absl::StrCat(dir, "/"))) hits.push_back(std::move(p));
  }
  return hits;
}

absl::StatusOr<int> UnmountBelow(const std::string& dir) {
  int count = 0;
  // Mounts stacked on one point come off one at a time; every pass removes
  // at least one or stops.
  for (int pass = 0; pass < 64; ++pass) {
    DSEC_ASSIGN_OR_RETURN(std::vector<std::string> hits, MountPointsBelow(dir));
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

}  // namespace dsec
