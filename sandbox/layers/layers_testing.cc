// SPDX-License-Identifier: Apache-2.0
#include "sandbox/layers/layers_testing.h"

#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "sandbox/layers/sha256.h"
#include "base/scoped_fd.h"
#include "base/status.h"
#include "base/subprocess.h"

namespace dsec::layers::testing {

TempDir::TempDir() {
  const char* tmp = getenv("TMPDIR");
  auto dir = MakeTempDir(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "dsec-layers-test-");
  DSEC_CHECK_OK(dir.status());
  path_ = *dir;
}

TempDir::~TempDir() {
  absl::Status s = RemoveTree(path_);
  if (!s.ok()) fprintf(stderr, "TempDir: %s\n", s.ToString().c_str());
}

absl::Status WriteFile(const std::string& path, const std::string& content, mode_t mode) {
  std::string parent = path.substr(0, path.find_last_of('/'));
  for (size_t pos = 1; pos != std::string::npos && pos <= parent.size();) {
    pos = parent.find('/', pos + 1);
    std::string p = parent.substr(0, pos);
    if (mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir " + p);
  }
  ScopedFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (!fd.valid()) return ErrnoStatus("open " + path);
  if (write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    return ErrnoStatus("write " + path);
  }
  if (fchmod(fd.get(), mode) != 0) return ErrnoStatus("fchmod " + path);
  return absl::OkStatus();
}

namespace {

absl::Status Snap(const std::string& root, const std::string& rel,
                  std::map<std::string, EntrySummary>* out) {
  std::string path = JoinPath(root, rel);
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return ErrnoStatus("lstat " + path);
  EntrySummary e;
  e.mode = st.st_mode & 07777;
  e.uid = st.st_uid;
  e.gid = st.st_gid;
  e.mtime_sec = st.st_mtim.tv_sec;
  e.mtime_nsec = st.st_mtim.tv_nsec;
  DSEC_ASSIGN_OR_RETURN(e.xattrs, ListXattrs(path));
  if (!S_ISDIR(st.st_mode)) e.nlink = st.st_nlink;
  switch (st.st_mode & S_IFMT) {
    case S_IFDIR: e.type = 'd'; break;
    case S_IFLNK: {
      e.type = 'l';
      e.size = static_cast<uint64_t>(st.st_size);
      e.content.resize(static_cast<size_t>(st.st_size) + 1);
      ssize_t n = readlink(path.c_str(), e.content.data(), e.content.size());
      if (n < 0) return ErrnoStatus("readlink " + path);
      e.content.resize(static_cast<size_t>(n));
      break;
    }
    case S_IFREG: {
      e.type = 'f';
      e.size = static_cast<uint64_t>(st.st_size);
      DSEC_ASSIGN_OR_RETURN(std::string data, ReadFile(path));
      Sha256 h;
      h.Update(data);
      e.content = ToHex(h.Finish());
      break;
    }
    case S_IFCHR: e.type = 'c'; e.rdev = st.st_rdev; break;
    case S_IFBLK: e.type = 'b'; e.rdev = st.st_rdev; break;
    case S_IFIFO: e.type = 'p'; break;
    default: e.type = 's'; break;
  }
  (*out)[rel] = e;
  if (S_ISDIR(st.st_mode)) {
    DSEC_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDirectory(path));
    for (const auto& n : names) DSEC_RETURN_IF_ERROR(Snap(root, rel.empty() ? n : rel + "/" + n, out));
  }
  return absl::OkStatus();
}

std::string Describe(const EntrySummary& e, bool mtime) {
  std::string s = absl::StrCat(std::string(1, e.type), " mode=", absl::Hex(e.mode), " uid=", e.uid,
                               " gid=", e.gid, " size=", e.size, " nlink=", e.nlink, " rdev=", e.rdev,
                               " content=", e.content.substr(0, 16));
  if (mtime) absl::StrAppend(&s, " mtime=", e.mtime_sec, ".", e.mtime_nsec);
  for (const auto& [k, v] : e.xattrs) absl::StrAppend(&s, " ", k, "=", v);
  return s;
}

}  // namespace

absl::StatusOr<std::map<std::string, EntrySummary>> SnapshotTree(const std::string& root) {
  std::map<std::string, EntrySummary> out;
  DSEC_RETURN_IF_ERROR(Snap(root, "", &out));
  return out;
}

std::vector<std::string> DiffSnapshots(const std::map<std::string, EntrySummary>& a,
                                       const std::map<std::string, EntrySummary>& b,
                                       bool compare_mtime) {
  std::vector<std::string> diffs;
  for (const auto& [path, ea] : a) {
    auto it = b.find(path);
    if (it == b.end()) {
      diffs.push_back(absl::StrCat("only in first: /", path));
      continue;
    }
    std::string da = Describe(ea, compare_mtime);
    std::string db = Describe(it->second, compare_mtime);
    if (da != db) diffs.push_back(absl::StrCat("/", path, ":\n  ", da, "\n  ", db));
  }
  for (const auto& [path, eb] : b) {
    if (a.count(path) == 0) diffs.push_back(absl::StrCat("only in second: /", path));
  }
  return diffs;
}

absl::Status RunInPrivateMountNamespace(const std::function<absl::Status()>& fn) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe2");
  ScopedFd read_end(fds[0]);
  ScopedFd write_end(fds[1]);
  fflush(nullptr);
  // A fork, not base/subprocess: the child runs `fn` (this test's code), not
  // a program.
  pid_t pid = fork();
  if (pid < 0) return ErrnoStatus("fork");
  if (pid == 0) {
    absl::Status s;
    if (unshare(CLONE_NEWNS) != 0) {
      s = ErrnoStatus("unshare(CLONE_NEWNS)");
    } else if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      s = ErrnoStatus("make / private");
    } else {
      s = fn();
    }
    std::string msg = absl::StrCat(static_cast<int>(s.code()), " ", s.message());
    (void)!write(write_end.get(), msg.data(), msg.size());
    _exit(0);
  }
  write_end.Reset();
  std::string msg;
  char buf[4096];
  for (;;) {
    ssize_t n = read(read_end.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    msg.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return ErrnoStatus("waitpid");
  }
  if (msg.empty()) return absl::InternalError(absl::StrCat("namespace child died, status ", status));
  int code = atoi(msg.c_str());
  std::string text = msg.substr(msg.find(' ') + 1);
  return absl::Status(static_cast<absl::StatusCode>(code), text);
}

std::string IntegrationSkipReason() {
  if (geteuid() != 0) return "needs root (mount, mknod, trusted.* xattrs)";
  SpawnOptions help;
  help.argv = {"mkfs.erofs", "--help"};
  auto r = RunSubprocess(help);
  if (!r.ok()) return "mkfs.erofs not found (install erofs-utils)";
  return "";
}

}  // namespace dsec::layers::testing
