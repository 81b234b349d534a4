// SPDX-License-Identifier: Apache-2.0
#include "guest-kernel/agent/process_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/scoped_fd.h"

namespace dsec::agent {

namespace {

bool ParsePid(absl::string_view s, pid_t* out) {
  int v = 0;
  if (!absl::SimpleAtoi(s, &v)) return false;
  *out = v;
  return true;
}

// Numeric entries of a /proc-like directory.
std::vector<pid_t> ListPids(const std::string& proc_root) {
  std::vector<pid_t> pids;
  DIR* dir = opendir(proc_root.c_str());
  if (dir == nullptr) return pids;
  while (dirent* d = readdir(dir)) {
    pid_t pid;
    if (d->d_name[0] >= '1' && d->d_name[0] <= '9' && ParsePid(d->d_name, &pid)) {
      pids.push_back(pid);
    }
  }
  closedir(dir);
  return pids;
}

bool ReadSmallFile(const std::string& path, std::string* out) {
  ScopedFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  char buf[1024];
  ssize_t n = read(fd.get(), buf, sizeof(buf));
  if (n <= 0) return false;
  out->assign(buf, static_cast<size_t>(n));
  return true;
}

}  // namespace

absl::StatusOr<ProcEntry> ParseProcStat(std::string_view line) {
  // "pid (comm) state ppid pgrp session ..."; comm is up to 16 bytes and
  // may hold ") ", so split at the last ')'.
  size_t close_paren = line.rfind(')');
  size_t space = line.find(' ');
  if (close_paren == std::string_view::npos || space == std::string_view::npos ||
      space > close_paren) {
    return absl::InvalidArgumentError("malformed /proc stat line");
  }
  ProcEntry e;
  if (!ParsePid(absl::string_view(line.data(), space), &e.pid)) {
    return absl::InvalidArgumentError("malformed pid in /proc stat line");
  }
  std::string_view rest = line.substr(close_paren + 1);
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::string_view(rest.data(), rest.size()), ' ', absl::SkipEmpty());
  // f[0] state, f[1] ppid, f[2] pgrp, f[3] session
  if (f.size() < 4 || !ParsePid(f[1], &e.ppid) || !ParsePid(f[2], &e.pgrp) ||
      !ParsePid(f[3], &e.session)) {
    return absl::InvalidArgumentError("malformed fields in /proc stat line");
  }
  return e;
}

std::vector<ProcEntry> ReadProcTable(const std::string& proc_root) {
  std::vector<ProcEntry> table;
  for (pid_t pid : ListPids(proc_root)) {
    std::string line;
    if (!ReadSmallFile(absl::StrCat(proc_root, "/", pid, "/stat"), &line)) continue;
    absl::StatusOr<ProcEntry> e = ParseProcStat(line);
    if (e.ok()) table.push_back(*e);
  }
  return table;
}

std::vector<pid_t> SelectExecTree(const std::vector<ProcEntry>& table, pid_t leader,
                                  bool include_descendants, pid_t self) {
  std::set<pid_t> selected;
  std::multimap<pid_t, pid_t> children;
  for (const ProcEntry& e : table) {
    children.emplace(e.ppid, e.pid);
    if (e.pgrp == leader || e.session == leader || (include_descendants && e.pid == leader)) {
      selected.insert(e.pid);
    }
  }
  if (include_descendants) {
    std::vector<pid_t> stack = {leader};
    std::set<pid_t> seen = {leader};
    while (!stack.empty()) {
      pid_t p = stack.back();
      stack.pop_back();
      auto [lo, hi] = children.equal_range(p);
      for (auto it = lo; it != hi; ++it) {
        if (seen.insert(it->second).second) {
          selected.insert(it->second);
          stack.push_back(it->second);
        }
      }
    }
  }
  selected.erase(self);
  selected.erase(1);
  selected.erase(0);
  return {selected.begin(), selected.end()};
}

std::vector<pid_t> FindPipeHolders(const std::vector<ino_t>& pipe_inodes, pid_t self,
                                   const std::string& proc_root) {
  std::vector<pid_t> holders;
  if (pipe_inodes.empty()) return holders;
  std::set<std::string> wanted;
  for (ino_t ino : pipe_inodes) wanted.insert(absl::StrCat("pipe:[", ino, "]"));
  for (pid_t pid : ListPids(proc_root)) {
    if (pid == self) continue;
    std::string fd_dir = absl::StrCat(proc_root, "/", pid, "/fd");
    DIR* dir = opendir(fd_dir.c_str());
    if (dir == nullptr) continue;
    bool holds = false;
    while (!holds) {
      dirent* d = readdir(dir);
      if (d == nullptr) break;
      if (d->d_name[0] == '.') continue;
      char target[64];
      ssize_t n = readlinkat(dirfd(dir), d->d_name, target, sizeof(target) - 1);
      if (n <= 0) continue;
      holds = wanted.count(std::string(target, static_cast<size_t>(n))) > 0;
    }
    closedir(dir);
    if (holds) holders.push_back(pid);
  }
  return holders;
}

namespace {

// `pid` is a child of `self` that has not exec'd yet: its parent is `self`
// and its executable is ours.
bool IsOurChildBeforeExec(pid_t pid, pid_t self) {
  std::string line;
  if (!ReadSmallFile(absl::StrCat("/proc/", pid, "/stat"), &line)) return false;
  absl::StatusOr<ProcEntry> e = ParseProcStat(line);
  if (!e.ok() || e->ppid != self) return false;
  struct stat ours;
  struct stat theirs;
  if (stat("/proc/self/exe", &ours) != 0 || stat(absl::StrCat("/proc/", pid, "/exe").c_str(), &theirs) != 0) {
    return false;
  }
  return ours.st_dev == theirs.st_dev && ours.st_ino == theirs.st_ino;
}

}  // namespace

int KillExecTree(pid_t leader, bool leader_unreaped, const std::vector<ino_t>& pipe_inodes) {
  const pid_t self = getpid();
  std::set<pid_t> stopped;
  kill(-leader, SIGSTOP);
  // Each round stops the members found so far; a member that forked just
  // before being stopped shows up in the next round. Bounded: a fork bomb
  // that outruns 64 rounds is still left stopped-and-killed in part, and the
  // group kill below catches the rest of its group.
  for (int round = 0; round < 64; ++round) {
    std::vector<ProcEntry> table = ReadProcTable();
    std::vector<pid_t> members = SelectExecTree(table, leader, leader_unreaped, self);
    // Our own other children may hold the pipes for a moment between fork
    // and exec (descriptors are close-on-exec): never count them as strays.
    // Such a child is ours and still runs our program; an orphan the
    // kernel re-parented to us (we are PID 1, or a subreaper) runs its
    // own. Read when the holder is found: a command another connection
    // starts now is forked after the table above was read.
    for (pid_t p : FindPipeHolders(pipe_inodes, self)) {
      if (p == 1) continue;
      if (p != leader && IsOurChildBeforeExec(p, self)) continue;
      members.push_back(p);
    }
    bool fresh = false;
    for (pid_t p : members) {
      if (stopped.insert(p).second) {
        kill(p, SIGSTOP);
        fresh = true;
      }
    }
    if (!fresh) break;
  }
  for (pid_t p : stopped) kill(p, SIGKILL);
  kill(-leader, SIGKILL);
  if (leader_unreaped) kill(leader, SIGKILL);
  return static_cast<int>(stopped.size());
}

}  // namespace dsec::agent
