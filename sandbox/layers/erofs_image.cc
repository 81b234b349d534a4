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
#include "base/mount.h"
#include "base/status.h"
#include "base/subprocess.h"

namespace dsec::layers {
namespace {

// mkfs.erofs with `env` as its whole environment (and PATH), stdin and
// stdout on /dev/null, the tail of stderr captured for errors and --help.
absl::StatusOr<SubprocessResult> RunMkfs(std::vector<std::string> argv, std::vector<std::string> env) {
  SpawnOptions o;
  o.argv = std::move(argv);
  o.inherit_env = false;
  o.env = std::move(env);
  o.err = Stdio::Capture();
  o.capture_max_bytes = 16 * 1024;
  return RunSubprocess(o);
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
  auto result = RunMkfs({mkfs, "--help"}, {"LC_ALL=C"});
  if (!result.ok()) return Annotate(result.status(), "mkfs.erofs --help (package erofs-utils)");
  // The list is the last line of the help text, on stderr.
  static constexpr char kPrefix[] = "Available compressors are:";
  size_t pos = result->err.rfind(kPrefix);
  std::vector<std::string> algs;
  if (pos != std::string::npos) {
    std::string line = result->err.substr(pos + sizeof(kPrefix) - 1);
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
  auto result = RunMkfs(argv, env);
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
  auto sb = ReadErofsSuperblock(image_path);
  if (absl::IsInvalidArgument(sb.status())) {
    return absl::InvalidArgumentError(absl::StrCat(image_path, " is not an EROFS image"));
  }
  return sb.status();
}

absl::StatusOr<Mount> MountErofsFile(const std::string& image_path, const std::string& target) {
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
  return Mount::Adopt(target);
}

absl::StatusOr<Mount> MountOverlay(const std::vector<std::string>& lowers, const std::string& upper,
                                   const std::string& work, const std::string& target) {
  // `lowers` is top first here, lowest first for OverlayLowerDir.
  DSEC_ASSIGN_OR_RETURN(std::string lowerdir,
                        OverlayLowerDir(std::vector<std::string>(lowers.rbegin(), lowers.rend())));
  std::string opts = absl::StrCat("lowerdir=", lowerdir);
  if (!upper.empty()) absl::StrAppend(&opts, ",upperdir=", upper, ",workdir=", work);
  absl::StrAppend(&opts, ",redirect_dir=off,metacopy=off");
  unsigned long flags = upper.empty() ? MS_RDONLY : 0;
  auto m = Mount::Create("overlay", target, "overlay", flags, opts);
  if (!m.ok()) return Annotate(m.status(), absl::StrCat("(", opts, ")"));
  return m;
}

}  // namespace dsec::layers
