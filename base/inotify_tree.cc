// SPDX-License-Identifier: Apache-2.0
#include "base/inotify_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/status.h"

namespace dsec {

namespace {

constexpr uint32_t kWatchMask = IN_CREATE | IN_DELETE | IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO |
                                IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK;

std::string JoinRel(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : absl::StrCat(dir, "/", name);
}

bool Within(const std::string& rel, const std::string& top) {
  return rel == top || (rel.size() > top.size() && rel.compare(0, top.size(), top) == 0 && rel[top.size()] == '/');
}

}  // namespace

struct InotifyDirWatch::Raw {
  int wd;
  uint32_t mask;
  uint32_t cookie;
  std::string name;
  bool paired = false;  // a MOVED_TO whose MOVED_FROM renamed its watches
};

absl::StatusOr<std::unique_ptr<InotifyDirWatch>> InotifyDirWatch::Create(std::unique_ptr<WatchedTree> tree,
                                                                         std::string path, bool recursive,
                                                                         size_t max_dirs) {
  ScopedFd in(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!in.valid()) {
    if (errno == EMFILE) {
      return absl::ResourceExhaustedError("the host's inotify instances are used up (fs.inotify.max_user_instances)");
    }
    return ErrnoToStatus("inotify_init1");
  }
  DSEC_ASSIGN_OR_RETURN(EventFd closed, EventFd::Create(EFD_NONBLOCK));
  std::unique_ptr<InotifyDirWatch> w(new InotifyDirWatch(std::move(tree), std::move(path), recursive,
                                                         std::max<size_t>(max_dirs, 1), std::move(in),
                                                         std::move(closed)));
  std::lock_guard<std::mutex> lock(w->mu_);
  DSEC_RETURN_IF_ERROR(w->AddTree(""));
  return w;
}

InotifyDirWatch::InotifyDirWatch(std::unique_ptr<WatchedTree> tree, std::string path, bool recursive,
                                 size_t max_dirs, ScopedFd inotify, EventFd closed)
    : tree_(std::move(tree)), path_(std::move(path)), recursive_(recursive), max_dirs_(max_dirs),
      inotify_(std::move(inotify)), closed_(std::move(closed)) {}

size_t InotifyDirWatch::watched_dirs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dirs_.size();
}

absl::StatusOr<std::vector<FileEvent>> InotifyDirWatch::Next(int64_t timeout_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failed_.ok()) return failed_;
  struct pollfd fds[2] = {{inotify_.get(), POLLIN, 0}, {closed_.fd(), POLLIN, 0}};
  const int64_t deadline = timeout_ms < 0 ? -1 : MonotonicNowNs() + timeout_ms * 1'000'000;
  for (;;) {
    int wait_ms = -1;
    if (deadline >= 0) wait_ms = static_cast<int>(std::max<int64_t>(0, (deadline - MonotonicNowNs()) / 1'000'000));
    const int n = ::poll(fds, 2, wait_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus("poll the directory watch");
    break;
  }
  if (fds[1].revents != 0) {
    failed_ = absl::UnavailableError("the watch was closed: its sandbox went");
    return failed_;
  }
  // Every event queued, then translated: a directory's MOVED_FROM is
  // matched with its MOVED_TO (same cookie) among all of them.
  std::vector<Raw> raw;
  alignas(struct inotify_event) char buf[65536];
  for (;;) {
    const ssize_t n = ::read(inotify_.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n < 0) return ErrnoToStatus("read the directory watch");
    if (n == 0) break;
    for (ssize_t off = 0; off < n;) {
      const auto* ev = reinterpret_cast<const struct inotify_event*>(buf + off);
      raw.push_back(Raw{ev->wd, ev->mask, ev->cookie, ev->len > 0 ? std::string(ev->name) : std::string()});
      off += static_cast<ssize_t>(sizeof(struct inotify_event) + ev->len);
    }
  }
  std::vector<FileEvent> out;
  for (size_t i = 0; i < raw.size(); ++i) Translate(raw, i, &out);
  if (out.empty() && !failed_.ok()) return failed_;
  return out;
}

std::string InotifyDirWatch::AbsPath(const std::string& rel) const {
  if (rel.empty()) return path_;
  return path_ == "/" ? absl::StrCat("/", rel) : absl::StrCat(path_, "/", rel);
}

// Watches the directory `rel` (the watched one for ""), and with
// recursive_ every directory below it. Below the watched directory a link
// is not followed, and a directory that is gone, a link or one the tree
// does not serve is left out, not an error.
absl::Status InotifyDirWatch::AddTree(const std::string& rel, std::vector<FileEvent>* found) {
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<WatchedTree::Walk> walk, tree_->BeginWalk());
  std::vector<std::pair<ScopedFd, std::string>> todo;
  if (rel.empty()) {
    DSEC_ASSIGN_OR_RETURN(ScopedFd top, walk->OpenDir(path_));
    todo.emplace_back(std::move(top), "");
  } else {
    const size_t slash = rel.rfind('/');
    const std::string parent = AbsPath(slash == std::string::npos ? "" : rel.substr(0, slash));
    const std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
    absl::StatusOr<ScopedFd> pfd = walk->OpenDir(parent);
    if (!pfd.ok()) return absl::OkStatus();
    ScopedFd fd(::openat(pfd->get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid() || !walk->Serves(fd.get(), AbsPath(rel))) return absl::OkStatus();
    todo.emplace_back(std::move(fd), rel);
  }
  while (!todo.empty()) {
    auto [fd, dir] = std::move(todo.back());
    todo.pop_back();
    if (dirs_.size() >= max_dirs_ && wds_.find(dir) == wds_.end()) {
      return absl::ResourceExhaustedError(absl::StrCat("more than ", max_dirs_, " directories under ", path_,
                                                       ": a watch holds that many at most"));
    }
    const std::string self = absl::StrCat("/proc/self/fd/", fd.get());
    const int wd = ::inotify_add_watch(inotify_.get(), self.c_str(), kWatchMask);
    if (wd < 0) {
      const int err = errno;
      if (err == ENOSPC) {
        return absl::ResourceExhaustedError("the host's inotify watches are used up (fs.inotify.max_user_watches)");
      }
      if (!dir.empty()) continue;  // one the walk may not read, or gone
      if (err == EACCES || err == EPERM) {
        return absl::FailedPreconditionError(absl::StrCat("may not watch ", path_));
      }
      return ErrnoToStatus(absl::StrCat("watch ", path_), err);
    }
    if (auto it = dirs_.find(wd); it != dirs_.end()) continue;  // seen by another path (a bind mount)
    dirs_[wd] = dir;
    wds_[dir] = wd;
    if (!recursive_) break;
    ScopedFd rd(::openat(fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!rd.valid()) continue;
    DIR* d = ::fdopendir(rd.get());
    if (d == nullptr) continue;
    (void)rd.Release();
    while (struct dirent* de = ::readdir(d)) {
      const std::string name = de->d_name;
      if (name == "." || name == "..") continue;
      const std::string sub_rel = JoinRel(dir, name);
      if (found != nullptr) found->push_back(FileEvent{sub_rel, FileEvent::Type::kCreate});
      if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN) continue;
      ScopedFd sub(::openat(::dirfd(d), de->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub.valid() || !walk->Serves(sub.get(), AbsPath(sub_rel))) continue;
      todo.emplace_back(std::move(sub), sub_rel);
    }
    ::closedir(d);
  }
  return absl::OkStatus();
}

void InotifyDirWatch::DropTree(const std::string& top) {
  for (auto it = wds_.lower_bound(top); it != wds_.end() && Within(it->first, top);) {
    (void)::inotify_rm_watch(inotify_.get(), it->second);
    dirs_.erase(it->second);
    it = wds_.erase(it);
  }
}

void InotifyDirWatch::Rename(const std::string& from, const std::string& to) {
  std::vector<std::pair<std::string, int>> moved;
  for (auto it = wds_.lower_bound(from); it != wds_.end() && Within(it->first, from);) {
    moved.emplace_back(to + it->first.substr(from.size()), it->second);
    it = wds_.erase(it);
  }
  for (auto& [rel, wd] : moved) {
    dirs_[wd] = rel;
    wds_[rel] = wd;
  }
}

// A directory made or moved in while watching: one that is gone again (or
// the tree with it) is no error; a watch over its limits is.
void InotifyDirWatch::AddBelow(const std::string& rel, std::vector<FileEvent>* out) {
  absl::Status s = AddTree(rel, out);
  if (absl::IsResourceExhausted(s)) Fail(std::move(s));
}

void InotifyDirWatch::Fail(absl::Status s) {
  if (failed_.ok()) failed_ = std::move(s);
}

void InotifyDirWatch::Translate(std::vector<Raw>& raw, size_t i, std::vector<FileEvent>* out) {
  using Type = FileEvent::Type;
  const Raw& ev = raw[i];
  if ((ev.mask & IN_Q_OVERFLOW) != 0) {
    return Fail(absl::ResourceExhaustedError(
        "events were lost: more came at once than the kernel queues (fs.inotify.max_queued_events)"));
  }
  auto it = dirs_.find(ev.wd);
  if (it == dirs_.end()) return;  // a directory dropped meanwhile
  const std::string rel = it->second;
  if ((ev.mask & IN_UNMOUNT) != 0) return Fail(absl::UnavailableError("the sandbox's file system went away"));
  if ((ev.mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) != 0) {
    if (rel.empty()) {
      return Fail(absl::NotFoundError(absl::StrCat("the watched directory ", path_, " was removed or moved")));
    }
    if ((ev.mask & IN_IGNORED) != 0) {
      wds_.erase(rel);
      dirs_.erase(it);
    }
    return;
  }
  const std::string name = JoinRel(rel, ev.name);
  const bool dir = (ev.mask & IN_ISDIR) != 0;
  auto add = [&](Type t) { out->push_back(FileEvent{name, t}); };
  if ((ev.mask & IN_CREATE) != 0) {
    add(Type::kCreate);
    if (dir && recursive_) AddBelow(name, out);
  }
  if ((ev.mask & IN_MOVED_FROM) != 0) {
    add(Type::kRename);
    if (dir && recursive_) {
      // Moved within the tree: its watches take the new name now (the
      // events after this one name it so); moved out: they go now.
      size_t to = i + 1;
      while (to < raw.size() && !((raw[to].mask & IN_MOVED_TO) != 0 && raw[to].cookie == ev.cookie)) ++to;
      auto dest = to < raw.size() ? dirs_.find(raw[to].wd) : dirs_.end();
      if (dest != dirs_.end()) {
        Rename(name, JoinRel(dest->second, raw[to].name));
        raw[to].paired = true;
      } else {
        DropTree(name);
      }
    }
  }
  if ((ev.mask & IN_MOVED_TO) != 0) {
    add(Type::kCreate);
    if (dir && recursive_ && !ev.paired) AddBelow(name, out);
  }
  if ((ev.mask & IN_DELETE) != 0) add(Type::kRemove);
  if ((ev.mask & IN_MODIFY) != 0) add(Type::kWrite);
  if ((ev.mask & IN_ATTRIB) != 0) add(Type::kChmod);
}

}  // namespace dsec
