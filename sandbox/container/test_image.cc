// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/test_image.h"

#include <elf.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sandbox/container/state_dir.h"
#include "base/file_io.h"
#include "base/scoped_fd.h"
#include "base/status.h"
#include "base/subprocess.h"

namespace dsec::container::testing {

namespace {

std::string FirstExisting(std::initializer_list<const char*> paths) {
  for (const char* p : paths) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

}  // namespace

absl::StatusOr<TempDir> TempDir::Create(const std::string& prefix) {
  std::string templ = absl::StrCat("/tmp/", prefix, "XXXXXX");
  if (::mkdtemp(templ.data()) == nullptr) return ErrnoToStatus("mkdtemp");
  return TempDir(templ);
}

TempDir::TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, std::string())) {}

TempDir::~TempDir() {
  if (!path_.empty()) (void)RemoveTree(path_);
}

absl::StatusOr<std::string> FindStaticBusybox() {
  std::string p = FirstExisting({"/bin/busybox", "/usr/bin/busybox"});
  if (p.empty()) return absl::UnavailableError("no busybox (apt-get install busybox-static)");
  // A dynamic executable has a PT_INTERP program header; it would not run
  // in a root without its libraries.
  ScopedFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  Elf64_Ehdr eh;
  if (!fd || ::pread(fd.get(), &eh, sizeof(eh), 0) != sizeof(eh)) {
    return ErrnoToStatus(absl::StrCat("read ", p));
  }
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    if (::pread(fd.get(), &ph, sizeof(ph), static_cast<off_t>(eh.e_phoff + i * sizeof(ph))) !=
        sizeof(ph)) {
      return ErrnoToStatus(absl::StrCat("read ", p));
    }
    if (ph.p_type == PT_INTERP) {
      return absl::UnavailableError(absl::StrCat(p, " is dynamically linked (need busybox-static)"));
    }
  }
  return p;
}

absl::StatusOr<std::string> FindMkfsErofs() {
  std::string p = FirstExisting({"/usr/bin/mkfs.erofs", "/usr/sbin/mkfs.erofs", "/sbin/mkfs.erofs"});
  if (p.empty()) return absl::UnavailableError("no mkfs.erofs (apt-get install erofs-utils)");
  return p;
}

absl::Status BuildBusyboxTree(const std::string& dir) {
  DSEC_ASSIGN_OR_RETURN(std::string path, FindStaticBusybox());
  DSEC_RETURN_IF_ERROR(MakeDirs(absl::StrCat(dir, "/bin")));
  DSEC_RETURN_IF_ERROR(MakeDirs(absl::StrCat(dir, "/etc")));
  DSEC_RETURN_IF_ERROR(MakeDirs(absl::StrCat(dir, "/root")));
  DSEC_RETURN_IF_ERROR(RunHostCommand({"/bin/cp", path, absl::StrCat(dir, "/bin/busybox")}).status());
  DSEC_ASSIGN_OR_RETURN(std::string list, RunHostCommand({path, "--list"}));
  for (absl::string_view applet : absl::StrSplit(list, '\n', absl::SkipEmpty())) {
    if (applet == "busybox") continue;
    std::string link = absl::StrCat(dir, "/bin/", applet);
    if (::symlink("busybox", link.c_str()) != 0 && errno != EEXIST) {
      return ErrnoToStatus(absl::StrCat("symlink ", link));
    }
  }
  DSEC_RETURN_IF_ERROR(WriteTreeFile(dir, "etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"
                                                        "nobody:x:65534:65534::/:/bin/false\n"));
  return WriteTreeFile(dir, "etc/group", "root:x:0:\nnogroup:x:65534:\n");
}

absl::Status WriteTreeFile(const std::string& root, const std::string& relpath,
                           const std::string& content, unsigned mode) {
  std::string path = absl::StrCat(root, "/", relpath);
  DSEC_RETURN_IF_ERROR(MakeDirs(path.substr(0, path.rfind('/'))));
  ScopedFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (!fd) return ErrnoToStatus(absl::StrCat("open ", path));
  if (::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    return ErrnoToStatus(absl::StrCat("write ", path));
  }
  if (::fchmod(fd.get(), mode) != 0) return ErrnoToStatus(absl::StrCat("chmod ", path));
  return absl::OkStatus();
}

absl::Status MakeErofs(const std::string& dir, const std::string& image) {
  DSEC_ASSIGN_OR_RETURN(std::string mkfs, FindMkfsErofs());
  return RunHostCommand({mkfs, "--quiet", image, dir}).status();
}

absl::StatusOr<std::string> RunHostCommand(const std::vector<std::string>& argv) {
  SpawnOptions o;
  o.argv = argv;
  o.in = Stdio::Inherit();
  o.out = Stdio::Capture();
  o.capture_max_bytes = 64 << 20;
  DSEC_ASSIGN_OR_RETURN(SubprocessResult r, RunSubprocess(o));
  if (!r.Succeeded()) {
    return absl::InternalError(absl::StrCat(argv[0], " failed (status ", r.wait_status, ")"));
  }
  return std::move(r.out);
}

absl::StatusOr<uint64_t> HashFile(const std::string& path) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoToStatus(absl::StrCat("open ", path));
  uint64_t h = 0xcbf29ce484222325ull;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd.get(), buf, sizeof(buf))) > 0) {
    for (ssize_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(buf[i])) * 0x100000001b3ull;
  }
  if (n < 0) return ErrnoToStatus(absl::StrCat("read ", path));
  return h;
}

absl::StatusOr<std::string> BuildBusyboxImage(const std::string& work_dir) {
  const std::string tree = work_dir + "/tree";
  DSEC_RETURN_IF_ERROR(BuildBusyboxTree(tree));
  const std::string image = work_dir + "/base.erofs";
  DSEC_RETURN_IF_ERROR(MakeErofs(tree, image));
  return image;
}

}  // namespace dsec::container::testing
