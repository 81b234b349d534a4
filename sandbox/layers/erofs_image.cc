// SPDX-License-Identifier: Apache-2.0
#include "sandbox/layers/erofs_image.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sandbox/layers/subprocess.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::layers {
namespace {

constexpr uint32_t kErofsMagic = 0xE0F5E1E2u;
constexpr size_t kErofsSuperblockOffset = 1024;
constexpr size_t kErofsSuperblockBytes = 128;

uint32_t Le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

bool AllOf(const std::string& s, bool (*pred)(char)) {
  return std::all_of(s.begin(), s.end(), pred);
}

}  // namespace

bool IsCompressed(const std::string& spec) { return !spec.empty() && spec != kNoCompression; }

absl::Status ValidateCompressionSpec(const std::string& spec) {
  if (!IsCompressed(spec)) return absl::OkStatus();
  std::vector<std::string> parts = absl::StrSplit(spec, ',');
  auto alg_char = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  bool ok = parts.size() <= 2 && !parts[0].empty() && parts[0].size() <= 16 && AllOf(parts[0], alg_char) &&
            (parts.size() == 1 || (!parts[1].empty() && parts[1].size() <= 2 && AllOf(parts[1], digit)));
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad compression '", spec, "': expected none, ALG or ALG,LEVEL (e.g. lz4hc or lz4hc,12)"));
  }
  return absl::OkStatus();
}

std::string CompressionAlgorithm(const std::string& spec) { return spec.substr(0, spec.find(',')); }

absl::StatusOr<std::vector<std::string>> AvailableErofsCompressors(const std::string& mkfs) {
  auto result = RunCommand({mkfs, "--help"}, {"LC_ALL=C"});
  if (!result.ok()) return Annotate(result.status(), "mkfs.erofs --help (package erofs-utils)");
  // The list is the last line of the help text, on stderr.
  static constexpr char kPrefix[] = "Available compressors are:";
  size_t pos = result->stderr_tail.rfind(kPrefix);
  std::vector<std::string> algs;
  if (pos != std::string::npos) {
    std::string line = result->stderr_tail.substr(pos + sizeof(kPrefix) - 1);
    line = line.substr(0, line.find('\n'));
    for (absl::string_view a : absl::StrSplit(line, ',')) {
      a = absl::StripAsciiWhitespace(a);
      if (!a.empty()) algs.emplace_back(a);
    }
  }
  if (algs.empty()) {
    return absl::UnavailableError(absl::StrCat(mkfs, " offers no compressor (its --help lists none)"));
  }
  return algs;
}

absl::Status CheckCompressionAvailable(const std::string& spec, const std::string& mkfs) {
  DSEC_RETURN_IF_ERROR(ValidateCompressionSpec(spec));
  if (!IsCompressed(spec)) return absl::OkStatus();
  DSEC_ASSIGN_OR_RETURN(std::vector<std::string> algs, AvailableErofsCompressors(mkfs));
  if (std::find(algs.begin(), algs.end(), CompressionAlgorithm(spec)) == algs.end()) {
    return absl::InvalidArgumentError(absl::StrCat("compressor '", CompressionAlgorithm(spec), "' is not offered by ",
                                                   mkfs, " (available: none, ", absl::StrJoin(algs, ", "), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> BuildErofsImage(const std::string& src_dir, const std::string& image_path,
                                         const ErofsBuildOptions& options) {
  struct stat st;
  if (lstat(image_path.c_str(), &st) == 0) {
    return absl::AlreadyExistsError(absl::StrCat(image_path, " exists"));
  }
  DSEC_RETURN_IF_ERROR(CheckCompressionAvailable(options.compression, options.mkfs));
  std::vector<std::string> argv = {options.mkfs, "--quiet", "--preserve-mtime"};
  if (!options.uuid.empty()) argv.push_back("-U" + options.uuid);
  if (IsCompressed(options.compression)) argv.push_back("-z" + options.compression);
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
  ssize_t n = pread(fd.get(), magic, sizeof(magic), kErofsSuperblockOffset);
  if (n < 0) return ErrnoStatus(absl::StrCat("pread ", image_path));
  if (n != 4 || Le32(magic) != kErofsMagic) {
    return absl::InvalidArgumentError(absl::StrCat(image_path, " is not an EROFS image"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ErofsSuperblockInfo> DecodeErofsSuperblock(const uint8_t* image, size_t len) {
  if (len < kErofsSuperblockOffset + kErofsSuperblockBytes) {
    return absl::InvalidArgumentError("too short for an EROFS superblock");
  }
  const uint8_t* sb = image + kErofsSuperblockOffset;
  if (Le32(sb) != kErofsMagic) return absl::InvalidArgumentError("no EROFS superblock magic");
  ErofsSuperblockInfo info;
  info.block_size_bits = sb[12];
  info.feature_incompat = Le32(sb + 80);
  info.compressed = (info.feature_incompat & kErofsIncompatCompressionMask) != 0;
  return info;
}

absl::StatusOr<ErofsSuperblockInfo> ReadErofsSuperblock(const std::string& image_path) {
  ScopedFd fd(open(image_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(absl::StrCat("open ", image_path));
  uint8_t buf[kErofsSuperblockOffset + kErofsSuperblockBytes];
  ssize_t n = pread(fd.get(), buf, sizeof(buf), 0);
  if (n < 0) return ErrnoStatus(absl::StrCat("pread ", image_path));
  auto info = DecodeErofsSuperblock(buf, static_cast<size_t>(n));
  if (!info.ok()) return Annotate(info.status(), image_path);
  return info;
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
