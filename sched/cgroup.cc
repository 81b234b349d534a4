// SPDX-License-Identifier: Apache-2.0
#include "sched/cgroup.h"

#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/file_io.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::sched {

namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (size_t k = 1; k <= 3; ++k) {
        char c = s[i + k];
        ok = ok && c >= '0' && c <= '7';
        v = v * 8 + (c - '0');
      }
      if (ok) {
        out += static_cast<char>(v);
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

bool HasWord(std::string_view list, char sep, std::string_view word) {
  for (absl::string_view item : absl::StrSplit(absl::string_view(list.data(), list.size()), sep)) {
    if (std::string_view(item.data(), item.size()) == word) return true;
  }
  return false;
}

std::string Join(const std::string& dir, std::string_view file) {
  return absl::StrCat(dir, "/", std::string(file));
}

}  // namespace

std::string_view CgroupVersionName(CgroupVersion version) {
  return version == CgroupVersion::kV1 ? "v1" : "v2";
}

absl::StatusOr<CgroupLayout> ParseCgroupLayout(
    std::string_view mountinfo,
    const std::function<absl::StatusOr<std::string>(const std::string&)>& read_file) {
  CgroupLayout v1, v2;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(mountinfo.data(), mountinfo.size()), '\n')) {
    if (line.empty()) continue;
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    size_t dash = 0;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (dash < 6 || dash + 3 > fields.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("mountinfo: malformed line \"", std::string(line), "\""));
    }
    const std::string& fstype = fields[dash + 1];
    const std::string& super_options = fields[dash + 3];
    ControllerMount mount;
    mount.mount_root = Unescape(fields[3]);
    mount.mount_point = Unescape(fields[4]);
    if (fstype == "cgroup") {
      mount.version = CgroupVersion::kV1;
      if (HasWord(super_options, ',', "cpuset") && !v1.cpuset) v1.cpuset = mount;
      if (HasWord(super_options, ',', "cpu") && !v1.cpu) v1.cpu = mount;
    } else if (fstype == "cgroup2") {
      mount.version = CgroupVersion::kV2;
      auto controllers = read_file(mount.mount_point + "/cgroup.controllers");
      if (!controllers.ok()) continue;  // unreadable v2 mount: offers nothing we can use
      std::string list = *controllers;
      while (!list.empty() && list.back() == '\n') list.pop_back();
      if (HasWord(list, ' ', "cpuset") && !v2.cpuset) v2.cpuset = mount;
      if (HasWord(list, ' ', "cpu") && !v2.cpu) v2.cpu = mount;
    }
  }
  CgroupLayout layout;
  layout.cpuset = v1.cpuset ? v1.cpuset : v2.cpuset;
  layout.cpu = v1.cpu ? v1.cpu : v2.cpu;
  return layout;
}

absl::StatusOr<CgroupLayout> DetectCgroupLayout() {
  DSEC_ASSIGN_OR_RETURN(std::string mountinfo, ReadSmallFile("/proc/self/mountinfo"));
  return ParseCgroupLayout(mountinfo, ReadSmallFile);
}

absl::StatusOr<std::string> OwnCgroupDir(const ControllerMount& mount,
                                         std::string_view proc_self_cgroup,
                                         std::string_view controller) {
  for (absl::string_view line : absl::StrSplit(
           absl::string_view(proc_self_cgroup.data(), proc_self_cgroup.size()), '\n')) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    const bool match = mount.version == CgroupVersion::kV2
                           ? parts[0] == "0" && parts[1].empty()
                           : HasWord(parts[1], ',', controller);
    if (!match) continue;
    std::string path = parts[2];
    // A cgroup outside the mounted subtree (another namespace's view) is
    // not reachable by path: fall back to the mount point itself.
    if (mount.mount_root != "/") {
      if (path.compare(0, mount.mount_root.size(), mount.mount_root) != 0) return mount.mount_point;
      path = path.substr(mount.mount_root.size());
    }
    while (!path.empty() && path.back() == '/') path.pop_back();
    return mount.mount_point + path;
  }
  return absl::NotFoundError(absl::StrCat("/proc/self/cgroup: no ",
                                          std::string(CgroupVersionName(mount.version)),
                                          " entry for ", std::string(controller)));
}

absl::StatusOr<CgroupDir> CgroupDir::Create(const std::string& parent, const std::string& name,
                                            CgroupVersion version) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat("bad cgroup name \"", name, "\""));
  }
  std::string path = Join(parent, name);
  if (::mkdir(path.c_str(), 0755) != 0) return ErrnoToStatus(absl::StrCat("mkdir ", path));
  return CgroupDir(parent, std::move(path), version);
}

CgroupDir::CgroupDir(CgroupDir&& other) noexcept
    : parent_(std::move(other.parent_)),
      path_(std::exchange(other.path_, std::string())),
      version_(other.version_) {}

CgroupDir& CgroupDir::operator=(CgroupDir&& other) noexcept {
  if (this != &other) {
    if (absl::Status s = Remove(); !s.ok()) DSEC_LOG(warn, "sched: {}", s.ToString());
    parent_ = std::move(other.parent_);
    path_ = std::exchange(other.path_, std::string());
    version_ = other.version_;
  }
  return *this;
}

CgroupDir::~CgroupDir() {
  if (absl::Status s = Remove(); !s.ok()) DSEC_LOG(warn, "sched: {}", s.ToString());
}

absl::Status CgroupDir::Write(std::string_view file, std::string_view value) const {
  return WriteSmallFile(Join(path_, file), value);
}

absl::StatusOr<std::string> CgroupDir::Read(std::string_view file) const {
  return ReadSmallFile(Join(path_, file));
}

absl::Status CgroupDir::AddThread(pid_t tid) const {
  return Write(version_ == CgroupVersion::kV1 ? "tasks" : "cgroup.procs", absl::StrCat(tid));
}

absl::Status CgroupDir::AddProcess(pid_t pid) const {
  return Write("cgroup.procs", absl::StrCat(pid));
}

absl::Status CgroupDir::Remove() {
  if (path_.empty()) return absl::OkStatus();
  const char* list = version_ == CgroupVersion::kV1 ? "tasks" : "cgroup.procs";
  // Tasks can join while we empty it (a thread spawned by a member lands
  // here too), so empty and retry a bounded number of times.
  absl::Status last;
  for (int attempt = 0; attempt < 16; ++attempt) {
    auto tasks = Read(list);
    if (tasks.ok()) {
      for (absl::string_view id : absl::StrSplit(*tasks, '\n', absl::SkipEmpty())) {
        const std::string target = Join(parent_, list);
        int err = WriteSmallFileErrno(target, std::string(id));
        // ESRCH: it exited meanwhile, which empties the cgroup just as well.
        if (err != 0 && err != ESRCH) {
          last = ErrnoToStatus(absl::StrCat("moving task ", std::string(id), " to ", target), err);
        }
      }
    }
    if (::rmdir(path_.c_str()) == 0 || errno == ENOENT) {
      path_.clear();
      return absl::OkStatus();
    }
    last = ErrnoToStatus(absl::StrCat("rmdir ", path_));
    if (errno != EBUSY) break;
  }
  return Annotate(last, absl::StrCat("removing cgroup ", path_));
}

std::string RandomCgroupName() {
  uint64_t r = 0;
  ssize_t n = ::getrandom(&r, sizeof(r), 0);
  DSEC_CHECK(n == sizeof(r));  // getrandom never fails for 8 bytes after boot
  return absl::StrFormat("dsec-%016x", r);
}

}  // namespace dsec::sched
