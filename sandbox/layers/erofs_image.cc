// SPDX-License-Identifier: Apache-2.0
#include "sandbox/layers/erofs_image.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sandbox/layers/subprocess.h"
#include "vmm/base/scoped_fd.h"
#include "vmm/base/status.h"

namespace dsec::layers {

absl::StatusOr<uint64_t> BuildErofsImage(const std::string& src_dir, const std::string& image_path,
                                         const ErofsBuildOptions& options) {
  struct stat st;
  if (lstat(image_path.c_str(), &st) == 0) {
    return absl::AlreadyExistsError(absl::StrCat(image_path, " exists"));
  }
  std::vector<std::string> argv = {options.mkfs, "--quiet", "--preserve-mtime"};
  if (!options.uuid.empty()) argv.push_back("-U" + options.uuid);
  argv.push_back(image_path);
  argv.push_back(src_dir);
  // SOURCE_DATE_EPOCH sets the superblock build time (and clamps newer mtimes).
  std::vector<std::string> env = {
      absl::StrCat("SOURCE_DATE_EPOCH=", options.build_time), "LC_ALL=C"};
  auto result = RunCommand(argv, env);
  if (!result.ok()) return Annotate(result.status(), "mkfs.erofs (package erofs-utils)");
  if (!result->Succeeded()) {
    unlink(image_path.c_str());
    return absl::InternalError(absl::StrCat("mkfs.erofs ", src_dir, ": ", result->Describe()));
  }
  absl::Status check = CheckErofsImage(image_path);
  if (!check.ok()) {
    unlink(image_path.c_str());
    return Annotate(check, "mkfs.erofs output");
  }
  return result->write_bytes;
}

absl::Status CheckErofsImage(const std::string& image_path) {
  ScopedFd fd(open(image_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(absl::StrCat("open ", image_path));
  uint8_t magic[4];
  ssize_t n = pread(fd.get(), magic, sizeof(magic), 1024);
  if (n < 0) return ErrnoStatus(absl::StrCat("pread ", image_path));
  uint32_t value = static_cast<uint32_t>(magic[0]) | static_cast<uint32_t>(magic[1]) << 8 |
                   static_cast<uint32_t>(magic[2]) << 16 | static_cast<uint32_t>(magic[3]) << 24;
  if (n != 4 || value != 0xE0F5E1E2u) {
    return absl::InvalidArgumentError(absl::StrCat(image_path, " is not an EROFS image"));
  }
  return absl::OkStatus();
}

ScopedMount::~ScopedMount() {
  if (!target_.empty()) umount2(target_.c_str(), MNT_DETACH);
}

ScopedMount& ScopedMount::operator=(ScopedMount&& other) noexcept {
  if (this != &other) {
    if (!target_.empty()) umount2(target_.c_str(), MNT_DETACH);
    target_ = std::move(other.target_);
    other.target_.clear();
  }
  return *this;
}

absl::Status ScopedMount::Unmount() {
  if (target_.empty()) return absl::OkStatus();
  std::string target = std::move(target_);
  target_.clear();
  if (umount2(target.c_str(), 0) != 0) return ErrnoStatus(absl::StrCat("umount ", target));
  return absl::OkStatus();
}

absl::StatusOr<ScopedMount> MountErofsFile(const std::string& image_path, const std::string& target) {
  DSEC_RETURN_IF_ERROR(CheckErofsImage(image_path));
  if (mount(image_path.c_str(), target.c_str(), "erofs", MS_RDONLY, nullptr) != 0) {
    int err = errno;
    if (err == ENODEV || err == ENOTBLK) {
      return absl::UnavailableError(absl::StrCat(
          "file-backed EROFS mount of ", image_path, " refused (", err == ENODEV ? "ENODEV" : "ENOTBLK",
          "): the kernel needs CONFIG_EROFS_FS and file-backed mounts (Linux 6.12+)"));
    }
    return ErrnoToStatus(absl::StrCat("mount erofs ", image_path, " on ", target), err);
  }
  return ScopedMount(target);
}

absl::StatusOr<ScopedMount> MountOverlay(const std::vector<std::string>& lowers,
                                         const std::string& upper, const std::string& work,
                                         const std::string& target) {
  if (lowers.empty()) return absl::InvalidArgumentError("overlay needs at least one lower layer");
  for (const auto& l : lowers) {
    if (l.find_first_of(",:") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("overlay layer path has ',' or ':': ", l));
    }
  }
  std::string opts = absl::StrCat("lowerdir=", absl::StrJoin(lowers, ":"));
  if (!upper.empty()) absl::StrAppend(&opts, ",upperdir=", upper, ",workdir=", work);
  absl::StrAppend(&opts, ",redirect_dir=off,metacopy=off");
  unsigned long flags = upper.empty() ? MS_RDONLY : 0;
  if (mount("overlay", target.c_str(), "overlay", flags, opts.c_str()) != 0) {
    return ErrnoToStatus(absl::StrCat("mount overlay on ", target, " (", opts, ")"));
  }
  return ScopedMount(target);
}

}  // namespace dsec::layers
