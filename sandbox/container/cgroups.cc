// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/cgroups.h"

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/clock.h"
#include "sched/sandbox_cgroup.h"
#include "base/file_io.h"
#include "base/logging.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::container {

namespace {
// Where a hybrid host mounts its cgroup v2 tree.
constexpr char kHybridV2Root[] = "/sys/fs/cgroup/unified";
}  // namespace

namespace {

constexpr const char* kControllers[] = {"memory", "pids", "cpu"};

bool HasItem(absl::string_view list, absl::string_view item) {
  for (absl::string_view x : absl::StrSplit(list, absl::ByAnyChar(", \n\t"), absl::SkipEmpty())) {
    if (x == item) return true;
  }
  return false;
}

// The hierarchy path of this process for a v1 controller or v2 ("").
std::optional<std::string> OwnPath(std::string_view proc_self_cgroup, std::string_view controller,
                                   bool v2) {
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(proc_self_cgroup.data(), proc_self_cgroup.size()), '\n',
                      absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    bool match = v2 ? (f[0] == "0" && f[1].empty())
                    : HasItem(f[1], absl::string_view(controller.data(), controller.size()));
    if (match) return std::string(f[2]);
  }
  return std::nullopt;
}

std::string Under(const std::string& mount_point, const std::string& mount_root,
                  const std::string& own) {
  std::string rel = own;
  if (mount_root != "/" && absl::StartsWith(rel, mount_root)) rel = rel.substr(mount_root.size());
  if (rel == "/") rel.clear();
  return absl::StrCat(mount_point, rel);
}

std::vector<pid_t> ReadProcs(const std::string& dir) {
  std::vector<pid_t> pids;
  auto text = dsec::ReadSmallFile(absl::StrCat(dir, "/cgroup.procs"));
  if (!text.ok()) return pids;
  for (absl::string_view s : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    int v = 0;
    if (absl::SimpleAtoi(s, &v) && v > 0) pids.push_back(v);
  }
  return pids;
}

uint64_t ReadKeyed(const std::string& path, absl::string_view key) {
  auto text = dsec::ReadSmallFile(path);
  if (!text.ok()) return 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, ' ');
    uint64_t v = 0;
    if (kv.first == key && absl::SimpleAtoi(kv.second, &v)) return v;
  }
  return 0;
}

}  // namespace

absl::StatusOr<std::vector<ControllerDir>> FindControllers(
    std::string_view mountinfo, std::string_view proc_self_cgroup,
    const std::function<absl::StatusOr<std::string>(const std::string&)>& read_file) {
  std::vector<ControllerDir> v1, v2;
  for (absl::string_view line : absl::StrSplit(
           absl::string_view(mountinfo.data(), mountinfo.size()), '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    size_t dash = 0;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash < 6 || dash + 3 > f.size()) {
      return absl::InvalidArgumentError(absl::StrCat("mountinfo: malformed line \"", line, "\""));
    }
    const std::string& fstype = f[dash + 1];
    const std::string& root = f[3];
    const std::string& point = f[4];
    for (const char* c : kControllers) {
      if (fstype == "cgroup" && HasItem(f[dash + 3], c)) {
        auto own = OwnPath(proc_self_cgroup, c, false);
        if (own) v1.push_back({c, false, Under(point, root, *own)});
      } else if (fstype == "cgroup2") {
        auto offered = read_file(absl::StrCat(point, "/cgroup.controllers"));
        auto own = OwnPath(proc_self_cgroup, c, true);
        if (offered.ok() && HasItem(*offered, c) && own) {
          v2.push_back({c, true, Under(point, root, *own)});
        }
      }
    }
  }
  std::vector<ControllerDir> out;
  for (const char* c : kControllers) {
    auto pick = [&](const std::vector<ControllerDir>& list) -> const ControllerDir* {
      for (const auto& d : list) {
        if (d.controller == c) return &d;
      }
      return nullptr;
    };
    if (const ControllerDir* d = pick(v1)) {
      out.push_back(*d);
    } else if (const ControllerDir* d2 = pick(v2)) {
      out.push_back(*d2);
    }
  }
  return out;
}

pid_t ProcessGroupOf(pid_t pid) {
  auto stat = dsec::ReadSmallFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.ok()) return 0;
  size_t paren = stat->rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat->size()) return 0;
  // After "comm) ": state ppid pgrp ...
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::string_view(*stat).substr(paren + 2), ' ');
  int pgid = 0;
  if (f.size() < 3 || !absl::SimpleAtoi(f[2], &pgid)) return 0;
  return pgid;
}

absl::StatusOr<int> KillCgroupProcesses(const std::vector<std::string>& dirs, pid_t keep,
                                        int64_t deadline_ns,
                                        const std::function<bool(pid_t)>& select) {
  int killed = 0;
  while (true) {
    std::vector<pid_t> pids;
    for (const std::string& d : dirs) {
      for (pid_t p : ReadProcs(d)) {
        if (p == keep || std::find(pids.begin(), pids.end(), p) != pids.end()) continue;
        if (!select || select(p)) pids.push_back(p);
      }
    }
    if (pids.empty()) return killed;
    std::vector<ScopedFd> fds;
    for (pid_t p : pids) {
      ScopedFd fd(static_cast<int>(::syscall(SYS_pidfd_open, p, 0)));
      if (!fd) continue;  // exited meanwhile
      if (::syscall(SYS_pidfd_send_signal, fd.get(), SIGKILL, nullptr, 0) == 0) ++killed;
      fds.push_back(std::move(fd));
    }
    // Wait for each to exit (its pidfd becomes readable), then look again:
    // members may have forked between the read and the kill.
    for (const ScopedFd& fd : fds) {
      while (true) {
        int64_t left_ms = (deadline_ns - MonotonicNowNs()) / 1'000'000;
        if (left_ms <= 0) {
          return absl::DeadlineExceededError(
              absl::StrCat("processes survive SIGKILL in ", dirs.empty() ? "" : dirs.front()));
        }
        pollfd p{fd.get(), POLLIN, 0};
        int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
        if (n > 0 || (n < 0 && errno != EINTR)) break;
      }
    }
  }
}

ContainerCgroups::ContainerCgroups(std::vector<Dir> dirs) : dirs_v_(std::move(dirs)) {
  for (const Dir& d : dirs_v_) {
    if (std::find(dirs_.begin(), dirs_.end(), d.path) == dirs_.end()) dirs_.push_back(d.path);
  }
}

ContainerCgroups::ContainerCgroups(ContainerCgroups&& other) noexcept
    : dirs_v_(std::exchange(other.dirs_v_, {})), dirs_(std::exchange(other.dirs_, {})) {}

ContainerCgroups& ContainerCgroups::operator=(ContainerCgroups&& other) noexcept {
  if (this != &other) {
    if (absl::Status s = Remove(); !s.ok()) DSEC_LOG(warn, "container: {}", s.ToString());
    dirs_v_ = std::exchange(other.dirs_v_, {});
    dirs_ = std::exchange(other.dirs_, {});
  }
  return *this;
}

ContainerCgroups::~ContainerCgroups() {
  if (absl::Status s = Remove(); !s.ok()) DSEC_LOG(warn, "container: {}", s.ToString());
}

absl::StatusOr<ContainerCgroups> ContainerCgroups::Create(
    const std::string& id, const ResourceLimits& limits, bool skip_cpu,
    const std::function<absl::Status(const std::string&)>& created) {
  DSEC_ASSIGN_OR_RETURN(std::string mountinfo, dsec::ReadSmallFile("/proc/self/mountinfo"));
  DSEC_ASSIGN_OR_RETURN(std::string self, dsec::ReadSmallFile("/proc/self/cgroup"));
  DSEC_ASSIGN_OR_RETURN(auto found, FindControllers(mountinfo, self, dsec::ReadSmallFile));
  std::vector<Dir> dirs;
  for (const ControllerDir& c : found) {
    if (skip_cpu && c.controller == "cpu") continue;
    dirs.push_back({c.controller, absl::StrCat(c.parent, "/dsec-ctr-", id), c.v2});
  }
  if (dirs.empty()) return absl::UnavailableError("no memory, pids or cpu cgroup controller");
  // A hybrid host's v2 tree holds no controllers but takes the sandbox's
  // BPF programs (Cgroup2DirFor): made with the others, so that the init
  // joins it in the same round of migrations (a made-ahead init ahead of
  // its create), instead of a migration of its own at create, which waits
  // for an RCU grace period when no other migration ran just before
  // (5-10 ms here).
  const bool any_v2 = std::any_of(dirs.begin(), dirs.end(), [](const Dir& d) { return d.v2; });
  if (!any_v2 && ::access(absl::StrCat(kHybridV2Root, "/cgroup.procs").c_str(), F_OK) == 0) {
    dirs.push_back({"", absl::StrCat(kHybridV2Root, "/dsec-ctr-", id), true});
  }
  // From here on the object owns whatever was made: an error below removes it.
  ContainerCgroups cg({});
  for (const Dir& d : dirs) {
    bool exists = std::find(cg.dirs_.begin(), cg.dirs_.end(), d.path) != cg.dirs_.end();
    if (!exists) {
      DSEC_RETURN_IF_ERROR(created(d.path));
      if (d.v2 && !d.controller.empty()) {
        // Best effort: a parent that does not delegate the controller shows
        // up as a missing limit file below.
        std::string parent = d.path.substr(0, d.path.rfind('/'));
        (void)dsec::WriteSmallFile(absl::StrCat(parent, "/cgroup.subtree_control"),
                                    absl::StrCat("+", d.controller));
      }
      if (::mkdir(d.path.c_str(), 0755) != 0) {
        return ErrnoToStatus(absl::StrCat("mkdir ", d.path));
      }
      cg.dirs_.push_back(d.path);
    }
    cg.dirs_v_.push_back(d);
    DSEC_RETURN_IF_ERROR(WriteLimits(d, limits));
  }
  return cg;
}

absl::Status ContainerCgroups::WriteLimits(const Dir& d, const ResourceLimits& limits) {
  auto write = [&](std::string_view file, std::string value) {
    return dsec::WriteSmallFile(absl::StrCat(d.path, "/", std::string(file)), value);
  };
  if (d.controller == "memory" && limits.memory_bytes > 0) {
    if (d.v2) {
      DSEC_RETURN_IF_ERROR(write("memory.max", absl::StrCat(limits.memory_bytes)));
      (void)write("memory.swap.max", "0");
    } else {
      DSEC_RETURN_IF_ERROR(write("memory.limit_in_bytes", absl::StrCat(limits.memory_bytes)));
      // memsw (memory+swap) exists only with swap accounting.
      if (dsec::PathExists(absl::StrCat(d.path, "/memory.memsw.limit_in_bytes"))) {
        DSEC_RETURN_IF_ERROR(write("memory.memsw.limit_in_bytes", absl::StrCat(limits.memory_bytes)));
      }
    }
  } else if (d.controller == "pids" && limits.pids_max > 0) {
    DSEC_RETURN_IF_ERROR(write("pids.max", absl::StrCat(limits.pids_max)));
  } else if (d.controller == "cpu") {
    if (d.v2) {
      DSEC_RETURN_IF_ERROR(write("cpu.weight", absl::StrCat(sched::SharesToWeight(limits.cpu_shares))));
      if (limits.cpu_quota_us) {
        DSEC_RETURN_IF_ERROR(
            write("cpu.max", absl::StrCat(*limits.cpu_quota_us, " ", limits.cpu_period_us)));
      }
    } else {
      DSEC_RETURN_IF_ERROR(write("cpu.shares", absl::StrCat(limits.cpu_shares)));
      if (limits.cpu_quota_us) {
        DSEC_RETURN_IF_ERROR(write("cpu.cfs_period_us", absl::StrCat(limits.cpu_period_us)));
        DSEC_RETURN_IF_ERROR(write("cpu.cfs_quota_us", absl::StrCat(*limits.cpu_quota_us)));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ContainerCgroups::ApplyLimits(const ResourceLimits& limits) const {
  for (const Dir& d : dirs_v_) DSEC_RETURN_IF_ERROR(WriteLimits(d, limits));
  return absl::OkStatus();
}

const ContainerCgroups::Dir* ContainerCgroups::Find(std::string_view controller) const {
  for (const Dir& d : dirs_v_) {
    if (d.controller == controller) return &d;
  }
  return nullptr;
}

absl::Status ContainerCgroups::AddProcess(pid_t pid) const {
  for (const std::string& d : dirs_) {
    DSEC_RETURN_IF_ERROR(dsec::WriteSmallFile(absl::StrCat(d, "/cgroup.procs"), absl::StrCat(pid)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ContainerCgroups::KillAll(pid_t keep, int64_t deadline_ns) const {
  return KillCgroupProcesses(dirs_, keep, deadline_ns);
}

absl::StatusOr<int> ContainerCgroups::KillGroup(pid_t pgid, int64_t deadline_ns) const {
  // kill(2) on a group is atomic against forks inside it; the cgroup walk
  // then waits for each member to be gone.
  ::kill(-pgid, SIGKILL);
  return KillCgroupProcesses(dirs_, 0, deadline_ns,
                             [pgid](pid_t p) { return ProcessGroupOf(p) == pgid; });
}

std::optional<uint64_t> ContainerCgroups::PeakMemoryBytes() const {
  const Dir* d = Find("memory");
  if (!d) return std::nullopt;
  auto text = dsec::ReadSmallFile(
      absl::StrCat(d->path, d->v2 ? "/memory.peak" : "/memory.max_usage_in_bytes"));
  uint64_t v = 0;
  if (!text.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &v)) return std::nullopt;
  return v;
}

void ContainerCgroups::ResetPeak() const {
  const Dir* d = Find("memory");
  // v2's memory.peak has no global reset; it then reports the sandbox's peak.
  if (d && !d->v2) (void)dsec::WriteSmallFile(absl::StrCat(d->path, "/memory.max_usage_in_bytes"), "0");
}

uint64_t ContainerCgroups::OomKills() const {
  const Dir* d = Find("memory");
  if (!d) return 0;
  return ReadKeyed(absl::StrCat(d->path, d->v2 ? "/memory.events" : "/memory.oom_control"),
                   "oom_kill");
}

absl::Status ContainerCgroups::Remove() {
  absl::Status first;
  for (const std::string& d : dirs_) {
    absl::Status s = KillAndRemoveCgroup(d);
    if (!s.ok() && first.ok()) first = s;
  }
  dirs_.clear();
  dirs_v_.clear();
  return first;
}

absl::Status ContainerCgroups::SetMemoryLimit(uint64_t bytes) const {
  const Dir* d = Find("memory");
  if (!d) return absl::UnavailableError("no memory cgroup");
  if (d->v2) return dsec::WriteSmallFile(absl::StrCat(d->path, "/memory.max"), absl::StrCat(bytes));
  const std::string limit = absl::StrCat(d->path, "/memory.limit_in_bytes");
  const std::string memsw = absl::StrCat(d->path, "/memory.memsw.limit_in_bytes");
  const bool has_memsw = dsec::PathExists(memsw);
  // memsw must stay >= the memory limit: raise memory last, lower it first.
  auto current = dsec::ReadSmallFile(limit);
  uint64_t cur = 0;
  bool raising = current.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*current), &cur) &&
                 bytes > cur;
  if (has_memsw && raising) DSEC_RETURN_IF_ERROR(dsec::WriteSmallFile(memsw, absl::StrCat(bytes)));
  DSEC_RETURN_IF_ERROR(dsec::WriteSmallFile(limit, absl::StrCat(bytes)));
  if (has_memsw && !raising) DSEC_RETURN_IF_ERROR(dsec::WriteSmallFile(memsw, absl::StrCat(bytes)));
  return absl::OkStatus();
}

absl::Status ContainerCgroups::SetPidsMax(uint64_t max) const {
  const Dir* d = Find("pids");
  if (!d) return absl::UnavailableError("no pids cgroup");
  return dsec::WriteSmallFile(absl::StrCat(d->path, "/pids.max"),
                               max == 0 ? std::string("max") : absl::StrCat(max));
}

std::optional<uint64_t> ContainerCgroups::MemoryUsageBytes() const {
  const Dir* d = Find("memory");
  if (!d) return std::nullopt;
  auto text = dsec::ReadSmallFile(
      absl::StrCat(d->path, d->v2 ? "/memory.current" : "/memory.usage_in_bytes"));
  uint64_t v = 0;
  if (!text.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &v)) return std::nullopt;
  return v;
}

uint64_t ContainerCgroups::PidsLimitHits() const {
  const Dir* d = Find("pids");
  if (!d) return 0;
  return ReadKeyed(absl::StrCat(d->path, "/pids.events"), "max");
}

absl::Status KillAndRemoveCgroup(const std::string& dir) {
  // Usually empty by now (the sandbox's processes died with its init):
  // one rmdir, no walk of its members.
  if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return absl::OkStatus();
  if (errno != EBUSY) return ErrnoToStatus(absl::StrCat("rmdir ", dir));
  absl::Status last;
  // A zombie still counts as a member until its parent reaps it, so rmdir
  // can briefly fail with EBUSY after the kill: kill again and retry.
  for (int attempt = 0; attempt < 200; ++attempt) {
    auto killed = KillCgroupProcesses({dir}, 0, MonotonicNowNs() + 5'000'000'000);
    if (!killed.ok()) last = killed.status();
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return absl::OkStatus();
    if (errno != EBUSY) return ErrnoToStatus(absl::StrCat("rmdir ", dir));
    last = ErrnoToStatus(absl::StrCat("rmdir ", dir));
  }
  return last;
}

absl::StatusOr<std::string> Cgroup2DirFor(const ContainerCgroups& cgroups, const std::string& id, pid_t pid,
                                          const std::function<absl::Status(const std::string&)>& record,
                                          std::string* made) {
  for (const std::string& d : cgroups.dirs()) {
    if (::access((d + "/cgroup.controllers").c_str(), F_OK) == 0) return d;
  }
  if (::access(absl::StrCat(kHybridV2Root, "/cgroup.procs").c_str(), F_OK) != 0) {
    return absl::UnavailableError("no cgroup v2 hierarchy to attach the sandbox's BPF programs to");
  }
  const std::string dir = absl::StrCat(kHybridV2Root, "/dsec-ctr-", id);
  DSEC_RETURN_IF_ERROR(record(dir));
  if (::mkdir(dir.c_str(), 0755) != 0) return ErrnoToStatus(absl::StrCat("mkdir ", dir));
  *made = dir;
  DSEC_RETURN_IF_ERROR(dsec::WriteSmallFile(dir + "/cgroup.procs", std::to_string(pid)));
  return dir;
}

}  // namespace dsec::container
