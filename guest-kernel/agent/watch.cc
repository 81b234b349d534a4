// SPDX-License-Identifier: Apache-2.0
// WATCH: a directory of the agent's root watched with inotify
// (base/inotify_tree.h), its changes streamed on the request's connection.
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sys/statfs.h>

#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/inotify_tree.h"
#include "base/status.h"
#include "guest-kernel/agent/handlers.h"
#include "guest-kernel/agent/sys_util.h"

namespace dsec::agent {

namespace {

// The kernel's interfaces: inotify reports none of their changes, and a
// recursive watch of "/" would otherwise walk all of /proc and /sys.
bool OnKernelFs(int fd) {
  struct statfs sf;
  if (::fstatfs(fd, &sf) != 0) return true;
  switch (sf.f_type) {
    case PROC_SUPER_MAGIC:
    case SYSFS_MAGIC:
    case CGROUP_SUPER_MAGIC:
    case CGROUP2_SUPER_MAGIC:
    case DEBUGFS_MAGIC:
    case TRACEFS_MAGIC:
    case SECURITYFS_MAGIC:
    case BPF_FS_MAGIC:
    case DEVPTS_SUPER_MAGIC:
    case PSTOREFS_MAGIC:
    case EFIVARFS_MAGIC:
      return true;
    default:
      return false;
  }
}

// The directories a WATCH reaches: inside the agent's root, resolved as
// the file requests are (RESOLVE_IN_ROOT), none on a kernel file system.
class AgentTree final : public WatchedTree {
 public:
  explicit AgentTree(int root_fd) : root_fd_(root_fd) {}

  absl::StatusOr<std::unique_ptr<Walk>> BeginWalk() override { return std::make_unique<AgentWalk>(root_fd_); }

 private:
  struct AgentWalk final : Walk {
    explicit AgentWalk(int fd) : root_fd(fd) {}
    absl::StatusOr<ScopedFd> OpenDir(const std::string& path) override {
      DSEC_ASSIGN_OR_RETURN(ScopedFd fd,
                            OpenAt2(root_fd, path, O_PATH | O_DIRECTORY, 0, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS));
      if (OnKernelFs(fd.get())) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, " is on a kernel file system (/proc, /sys, ...), whose changes are not watched"));
      }
      return fd;
    }
    bool Serves(int fd, const std::string& /*path*/) override { return !OnKernelFs(fd); }
    const int root_fd;
  };

  const int root_fd_;
};

// The changes in WATCH_EVENTS frames, each far below the frame limit.
absl::Status SendEvents(const HandlerEnv& env, FrameConn& conn, std::vector<FileEvent> events) {
  constexpr size_t kEventsPerFrame = 4096;
  WatchEvents frame;
  size_t name_bytes = 0;
  for (FileEvent& e : events) {
    if (!frame.events.empty() &&
        (frame.events.size() >= kEventsPerFrame || name_bytes + e.name.size() > kWatchEventNameBytesPerFrame)) {
      DSEC_RETURN_IF_ERROR(conn.Write(ToFrame(frame), env.WriteDeadline(), env.stop_fd));
      frame.events.clear();
      name_bytes = 0;
    }
    name_bytes += e.name.size();
    frame.events.push_back(std::move(e));
  }
  if (frame.events.empty()) return absl::OkStatus();
  return conn.Write(ToFrame(frame), env.WriteDeadline(), env.stop_fd);
}

}  // namespace

absl::Status HandleWatch(HandlerEnv& env, FrameConn& conn, const WatchRequest& request) {
  if (request.path.empty() || request.path.find('\0') != std::string::npos || request.path.size() > 4096) {
    return SendRequestError(env, conn, absl::InvalidArgumentError("WATCH: the path must be 1..4096 bytes without NUL"));
  }
  absl::StatusOr<std::unique_ptr<InotifyDirWatch>> made =
      InotifyDirWatch::Create(std::make_unique<AgentTree>(env.root_fd), request.path, request.recursive,
                              request.max_dirs);
  if (!made.ok()) return SendRequestError(env, conn, made.status());
  InotifyDirWatch& watch = **made;
  WatchStarted started;
  started.dirs = watch.watched_dirs();
  DSEC_RETURN_IF_ERROR(conn.Write(ToFrame(started), env.WriteDeadline(), env.stop_fd));
  env.metrics.watches.fetch_add(1);
  for (;;) {
    struct pollfd fds[3] = {{watch.fd(), POLLIN, 0}, {conn.fd(), POLLIN, 0}, {env.stop_fd, POLLIN, 0}};
    const int n = ::poll(fds, 3, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus("poll a watch");
    if (fds[2].revents != 0) return absl::CancelledError("the agent stops");
    if (fds[1].revents != 0) {
      // The host sends nothing during a watch: it ends one by closing.
      DSEC_RETURN_IF_ERROR(conn.ReadSome());
      if (conn.peer_closed()) return absl::UnavailableError("the host ended the watch");
      DSEC_ASSIGN_OR_RETURN(std::optional<Frame> f, conn.Pop());
      if (f.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("protocol: unexpected ", TypeName(f->type), " frame during a watch"));
      }
    }
    // Until nothing waits: a watch that ends with its last events (a
    // directory over its bound) reports the end on the call after them.
    while (fds[0].revents != 0) {
      absl::StatusOr<std::vector<FileEvent>> events = watch.Next(0);
      // The watch's end (its directory went, events lost, too many
      // directories): said, and the connection serves requests again.
      if (!events.ok()) return SendRequestError(env, conn, events.status());
      if (events->empty()) break;
      DSEC_RETURN_IF_ERROR(SendEvents(env, conn, *std::move(events)));
    }
  }
}

}  // namespace dsec::agent
