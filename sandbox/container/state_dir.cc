// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/state_dir.h"

#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sandbox/container/cgroups.h"
#include "sandbox/container/mount.h"
#include "base/file_io.h"
#include "base/logging.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::container {

namespace {

int RemoveEntry(const char* path, const struct stat*, int type, FTW*) {
  int rc = (type == FTW_DP) ? ::rmdir(path) : ::unlink(path);
  return rc == 0 || errno == ENOENT ? 0 : errno;
}

// Parses "<pid> <starttime>" (the owner and init records); 0 if malformed.
pid_t RecordedPid(absl::string_view record) {
  std::vector<absl::string_view> f = absl::StrSplit(absl::StripAsciiWhitespace(record), ' ');
  int pid = 0;
  if (f.size() != 2 || !absl::SimpleAtoi(f[0], &pid)) return 0;
  return pid;
}

// The process recorded as "<pid> <starttime>" is that process still (a
// reused pid has another start time).
bool StillRecorded(absl::string_view record) {
  pid_t pid = RecordedPid(record);
  if (pid <= 0) return false;
  auto now = ProcessIdentity(pid);
  return now && *now == absl::StripAsciiWhitespace(record);
}

// Kills the process recorded as "<pid> <starttime>" if it is still that
// process, and (with `cmdline_needle`) its command line contains the
// needle: the pidfd pins it while the record is checked. Waits for it to
// be gone and reaps it if it is a child of this process (a test's
// abandoned sandbox).
absl::Status KillRecorded(absl::string_view record, const std::string& cmdline_needle) {
  const pid_t pid = RecordedPid(record);
  if (pid <= 1) return absl::OkStatus();
  ScopedFd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!fd || !StillRecorded(record)) return absl::OkStatus();
  if (!cmdline_needle.empty()) {
    auto cmdline = dsec::ReadSmallFile(absl::StrCat("/proc/", pid, "/cmdline"));
    if (!cmdline.ok() || cmdline->find(cmdline_needle) == std::string::npos) return absl::OkStatus();
  }
  ::syscall(SYS_pidfd_send_signal, fd.get(), SIGKILL, nullptr, 0);
  // A namespace's init leaves its cgroups before it has killed and reaped
  // the rest of the namespace; its pidfd turns readable only after that.
  pollfd p{fd.get(), POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&p, 1, 5000);
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) {
    return absl::DeadlineExceededError(absl::StrCat("orphan process ", pid, " did not exit"));
  }
  siginfo_t info{};
  ::waitid(static_cast<idtype_t>(3) /* P_PIDFD */, static_cast<id_t>(fd.get()), &info,
           WEXITED | WNOHANG);
  return absl::OkStatus();
}

}  // namespace

std::optional<std::string> ProcessIdentity(pid_t pid) {
  auto stat = dsec::ReadSmallFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.ok()) return std::nullopt;
  size_t paren = stat->rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  // Fields after "comm)": state is field 3, starttime field 22.
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::string_view(*stat).substr(paren + 2), ' ');
  if (f.size() < 20) return std::nullopt;
  if (f[0] == "Z" || f[0] == "X") return std::nullopt;  // exited, not yet reaped
  return absl::StrCat(pid, " ", f[19]);
}

absl::StatusOr<StateDir> StateDir::Create(const std::string& root, const std::string& id) {
  DSEC_RETURN_IF_ERROR(MakeDirs(root, 0700));
  std::string path = absl::StrCat(root, "/", id);
  if (::mkdir(path.c_str(), 0700) != 0) return ErrnoToStatus(absl::StrCat("mkdir ", path));
  StateDir dir(path);
  auto me = ProcessIdentity(::getpid());
  if (!me) return absl::InternalError("cannot read /proc/self/stat");
  DSEC_RETURN_IF_ERROR(WriteFile(absl::StrCat(path, "/owner"), *me, 0600));
  return dir;
}

StateDir::StateDir(StateDir&& other) noexcept
    : path_(std::exchange(other.path_, std::string())) {}

StateDir& StateDir::operator=(StateDir&& other) noexcept {
  if (this != &other) {
    if (absl::Status s = Remove(); !s.ok()) DSEC_LOG(warn, "container: {}", s.ToString());
    path_ = std::exchange(other.path_, std::string());
  }
  return *this;
}

StateDir::~StateDir() {
  if (absl::Status s = Remove(); !s.ok()) DSEC_LOG(warn, "container: {}", s.ToString());
}

absl::Status StateDir::RenameTo(const std::string& id) {
  std::string target = absl::StrCat(path_.substr(0, path_.rfind('/') + 1), id);
  if (::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE) != 0) {
    return ErrnoToStatus(absl::StrCat("rename ", path_, " to ", target));
  }
  path_ = std::move(target);
  return absl::OkStatus();
}

absl::Status StateDir::RecordCgroup(const std::string& cgroup_dir) const {
  return WriteFile(absl::StrCat(path_, "/cgroups"), absl::StrCat(cgroup_dir, "\n"), 0600, /*append=*/true);
}

absl::Status StateDir::RecordInit(pid_t pid) const {
  auto id = ProcessIdentity(pid);
  if (!id) return absl::NotFoundError(absl::StrCat("init process ", pid, " is gone"));
  return WriteFile(absl::StrCat(path_, "/init"), *id, 0600);
}

absl::Status StateDir::Remove() {
  if (path_.empty()) return absl::OkStatus();
  std::string path = std::exchange(path_, std::string());
  return RemoveTree(path);
}

absl::Status RemoveTree(const std::string& path) {
  int rc = ::nftw(path.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
  if (rc != 0 && !(rc == -1 && errno == ENOENT)) {
    return ErrnoToStatus(absl::StrCat("removing ", path), rc > 0 ? rc : errno);
  }
  if (::access(path.c_str(), F_OK) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(path, " still exists (a mount left?)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> CleanupOrphans(const std::string& root, const OrphanCleanupOptions& options) {
  auto entries = dsec::ListDirectory(root);
  if (!entries.ok()) {
    if (absl::IsNotFound(entries.status())) return 0;
    return entries.status();
  }
  int removed = 0;
  absl::Status first;
  auto note = [&first](absl::Status s) {
    if (!s.ok() && first.ok()) first = s;
  };
  for (const std::string& id : *entries) {
    const std::string dir = absl::StrCat(root, "/", id);
    struct stat st;
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (auto owner = dsec::ReadSmallFile(absl::StrCat(dir, "/owner"));
        owner.ok() && StillRecorded(*owner)) {
      continue;  // its runtime lives
    }
    DSEC_LOG(info, "{}: removing orphaned sandbox={} dir={}", options.tier, id, dir);
    if (options.before_kill) options.before_kill(id);
    if (auto init = dsec::ReadSmallFile(absl::StrCat(dir, "/init")); init.ok()) {
      note(KillRecorded(*init, options.init_cmdline_names_dir ? dir + "/" : ""));
    }
    if (auto cgroups = dsec::ReadSmallFile(absl::StrCat(dir, "/cgroups")); cgroups.ok()) {
      for (absl::string_view cg : absl::StrSplit(*cgroups, '\n', absl::SkipEmpty())) {
        note(options.remove_cgroup ? options.remove_cgroup(std::string(cg))
                                   : KillAndRemoveCgroup(std::string(cg)));
      }
    }
    if (options.after_kill) note(options.after_kill(id, dir));
    note(UnmountBelow(dir).status());
    absl::Status rm = RemoveTree(dir);
    note(rm);
    // Made-ahead slots and tombstones (".slot-", ".dead-": init_pool.h)
    // are removed too but are not sandboxes.
    if (rm.ok() && id[0] != '.') ++removed;
  }
  if (!first.ok()) return first;
  return removed;
}

namespace {

// A tmpfs mounted at `root` itself (not a directory of one) smaller than
// kStateRootTmpfsBytes, as an earlier runtime made it (64 MiB): grown, its
// other mount flags kept. Anything else is left as it is.
void GrowStateRootTmpfs(const std::string& root) {
  struct statx stx {};
  struct statfs fs {};
  struct statvfs vfs {};
  if (::statx(AT_FDCWD, root.c_str(), 0, STATX_BASIC_STATS, &stx) != 0 ||
      (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) == 0 || (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) == 0 ||
      ::statfs(root.c_str(), &fs) != 0 || fs.f_type != TMPFS_MAGIC || ::statvfs(root.c_str(), &vfs) != 0) {
    return;
  }
  const uint64_t size = static_cast<uint64_t>(fs.f_blocks) * static_cast<uint64_t>(fs.f_bsize);
  if (size == 0 || size >= kStateRootTmpfsBytes) return;  // 0: no size limit
  unsigned long flags = MS_REMOUNT;
  if (vfs.f_flag & ST_RDONLY) flags |= MS_RDONLY;
  if (vfs.f_flag & ST_NOSUID) flags |= MS_NOSUID;
  if (vfs.f_flag & ST_NODEV) flags |= MS_NODEV;
  if (vfs.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (vfs.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (vfs.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (vfs.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  const std::string data = absl::StrCat("size=", kStateRootTmpfsBytes);
  if (::mount(nullptr, root.c_str(), nullptr, flags, data.c_str()) != 0) {
    DSEC_LOG(warn, "container: state root {} is a tmpfs of {} MiB; growing it to {} MiB: {}", root, size >> 20,
             kStateRootTmpfsBytes >> 20, ErrnoToStatus("remount").ToString());
    return;
  }
  DSEC_LOG(info, "container: state root {} grown from {} to {} MiB", root, size >> 20, kStateRootTmpfsBytes >> 20);
}

}  // namespace

absl::StatusOr<bool> MountStateRootTmpfs(const std::string& root) {
  auto on_tmpfs = [&root]() -> absl::StatusOr<bool> {
    struct statfs fs;
    if (::statfs(root.c_str(), &fs) != 0) return ErrnoToStatus(absl::StrCat("statfs ", root));
    return fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC;
  };
  DSEC_RETURN_IF_ERROR(MakeDirs(root, 0700));
  DSEC_ASSIGN_OR_RETURN(bool already, on_tmpfs());
  if (already) {
    GrowStateRootTmpfs(root);
    return false;
  }
  // Two runtimes starting at once: the lock is on the directory below the
  // mount, so the second sees the first's tmpfs when it gets the lock.
  ScopedFd dir(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return ErrnoToStatus(absl::StrCat("open ", root));
  if (::flock(dir.get(), LOCK_EX) != 0) return ErrnoToStatus(absl::StrCat("flock ", root));
  DSEC_ASSIGN_OR_RETURN(already, on_tmpfs());
  if (already) {
    GrowStateRootTmpfs(root);
    return false;
  }
  // Never hide sandboxes recorded on the disk below (CleanupOrphans and
  // their runtimes find them by path).
  ScopedFd probe(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!probe) return ErrnoToStatus(absl::StrCat("open ", root));
  char buf[256];
  long n = ::syscall(SYS_getdents64, probe.get(), buf, sizeof(buf));
  if (n < 0) return ErrnoToStatus(absl::StrCat("getdents64 ", root));
  if (n > 48) return false;  // more than "." and ".." (24 bytes each)
  if (::mount("tmpfs", root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              absl::StrCat("mode=0700,size=", kStateRootTmpfsBytes).c_str()) != 0) {
    return ErrnoToStatus(absl::StrCat("mount tmpfs on ", root));
  }
  return true;
}

}  // namespace dsec::container
