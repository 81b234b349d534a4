// SPDX-License-Identifier: Apache-2.0
// File requests (read, write, list) confined to the server's root, and
// PACK_DIFF.
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "guest-kernel/agent/handlers.h"
#include "guest-kernel/agent/pack_diff_stream.h"
#include "guest-kernel/agent/sys_util.h"
#include "base/status.h"

namespace dsec::agent {

namespace {

// Host-controlled paths resolve as if `root` were "/": ".." stops at the
// root, absolute paths and absolute symlinks start there, and magic links
// (/proc/<pid>/root, /proc/<pid>/fd/N) are refused outright.
constexpr uint64_t kInRoot = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
constexpr size_t kMaxListEntries = 1'000'000;

absl::Status CheckRequestPath(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("empty path");
  if (path.find('\0') != std::string::npos) return absl::InvalidArgumentError("path holds NUL");
  if (path.size() > 4096) return absl::InvalidArgumentError("path too long");
  return absl::OkStatus();
}

// Creates the missing directories above `path` (mode 0755), each inside the
// root: a file write makes its parents, as the container tier's does.
absl::Status MakeParents(int root_fd, const std::string& path) {
  std::vector<std::string> parts;
  size_t at = 0;
  while (at < path.size()) {
    size_t next = path.find('/', at);
    if (next == std::string::npos) break;  // the last part is the file
    if (next > at) parts.push_back(path.substr(at, next - at));
    at = next + 1;
  }
  std::string dir = "/";
  for (const std::string& name : parts) {
    if (name == "." || name == "..") {
      dir += name + "/";
      continue;
    }
    DSEC_ASSIGN_OR_RETURN(ScopedFd parent,
                          OpenAt2(root_fd, dir, O_PATH | O_DIRECTORY, 0, kInRoot));
    if (mkdirat(parent.get(), name.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoToStatus(absl::StrCat("mkdir ", dir, name));
    }
    dir += name + "/";
  }
  return absl::OkStatus();
}

class ConnSink : public FrameSink {
 public:
  ConnSink(const HandlerEnv& env, FrameConn& conn) : env_(env), conn_(conn) {}
  absl::Status SendFrame(const Frame& frame) override {
    if (!failed_.ok()) return failed_;
    failed_ = conn_.Write(frame, env_.WriteDeadline(), env_.stop_fd);
    return failed_;
  }
  const absl::Status& failed() const { return failed_; }

 private:
  const HandlerEnv& env_;
  FrameConn& conn_;
  absl::Status failed_;
};

}  // namespace

absl::Status SendRequestError(const HandlerEnv& env, FrameConn& conn, const absl::Status& status) {
  return conn.Write(ToFrame(ErrorFromStatus(status)), env.WriteDeadline(), env.stop_fd);
}

absl::Status HandleFileRead(HandlerEnv& env, FrameConn& conn, const FileReadRequest& req) {
  if (absl::Status s = CheckRequestPath(req.path); !s.ok()) return SendRequestError(env, conn, s);
  absl::StatusOr<ScopedFd> fd =
      OpenAt2(env.root_fd, req.path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0, kInRoot);
  if (!fd.ok()) return SendRequestError(env, conn, fd.status());
  struct stat st;
  if (fstat(fd->get(), &st) != 0) return SendRequestError(env, conn, ErrnoStatus("fstat"));
  if (!S_ISREG(st.st_mode)) {
    return SendRequestError(
        env, conn,
        absl::InvalidArgumentError(absl::StrCat(
            req.path, S_ISDIR(st.st_mode) ? " is a directory" : " is not a regular file")));
  }
  FileReadDone done;
  done.size = static_cast<uint64_t>(st.st_size);
  std::string buf(kDataChunkBytes, '\0');
  while (done.bytes < req.max_bytes) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), req.max_bytes - done.bytes));
    ssize_t n = read(fd->get(), buf.data(), want);
    if (n < 0) {
      if (errno == EINTR) continue;
      return SendRequestError(env, conn, ErrnoToStatus(absl::StrCat("read ", req.path)));
    }
    if (n == 0) break;
    DSEC_RETURN_IF_ERROR(conn.Write(DataFrame(MsgType::kData, std::string_view(buf.data(), n)),
                                    env.WriteDeadline(), env.stop_fd));
    done.bytes += static_cast<uint64_t>(n);
  }
  if (done.bytes == req.max_bytes) {
    char probe;
    ssize_t n;
    do {
      n = read(fd->get(), &probe, 1);
    } while (n < 0 && errno == EINTR);
    done.truncated = n > 0;
  }
  return conn.Write(ToFrame(done), env.WriteDeadline(), env.stop_fd);
}

absl::Status HandleFileWrite(HandlerEnv& env, FrameConn& conn, const FileWriteRequest& req) {
  // The data follows regardless of what happens here; it is always consumed
  // so that the stream stays in step, and the first error is the reply.
  absl::Status result = CheckRequestPath(req.path);
  if (result.ok()) result = MakeParents(env.root_fd, req.path);
  ScopedFd fd;
  if (result.ok()) {
    absl::StatusOr<ScopedFd> opened =
        OpenAt2(env.root_fd, req.path, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_NOCTTY,
                req.mode, kInRoot);
    if (opened.ok()) {
      fd = *std::move(opened);
      struct stat st;
      if (fstat(fd.get(), &st) != 0) {
        result = ErrnoStatus("fstat");
      } else if (!S_ISREG(st.st_mode)) {
        result = absl::InvalidArgumentError(absl::StrCat(req.path, " is not a regular file"));
      } else if (fchmod(fd.get(), req.mode) != 0) {  // independent of the umask
        result = ErrnoToStatus(absl::StrCat("chmod ", req.path));
      }
    } else {
      result = opened.status();
    }
  }
  uint64_t got = 0;
  while (got < req.size) {
    DSEC_ASSIGN_OR_RETURN(Frame f, conn.Read(env.WriteDeadline(), env.stop_fd));
    if (f.type != MsgType::kData) {
      return absl::InvalidArgumentError(
          absl::StrCat("protocol: expected DATA of FILE_WRITE, got ", TypeName(f.type)));
    }
    if (f.payload.empty() || f.payload.size() > req.size - got) {
      return absl::InvalidArgumentError("protocol: FILE_WRITE data does not match its size");
    }
    got += f.payload.size();
    if (result.ok()) {
      result = WriteAll(fd.get(), f.payload);
      if (!result.ok()) result = Annotate(result, req.path);
    }
  }
  if (!result.ok()) return SendRequestError(env, conn, result);
  FileWriteDone done;
  done.bytes = got;
  return conn.Write(ToFrame(done), env.WriteDeadline(), env.stop_fd);
}

absl::Status HandleListDir(HandlerEnv& env, FrameConn& conn, const ListDirRequest& req) {
  std::string path = req.path.empty() ? "." : req.path;
  if (absl::Status s = CheckRequestPath(path); !s.ok()) return SendRequestError(env, conn, s);
  absl::StatusOr<ScopedFd> fd = OpenAt2(env.root_fd, path, O_RDONLY | O_DIRECTORY, 0, kInRoot);
  if (!fd.ok()) return SendRequestError(env, conn, fd.status());
  DIR* dir = fdopendir(fd->get());
  if (dir == nullptr) return SendRequestError(env, conn, ErrnoStatus("fdopendir"));
  fd->Release();  // owned by `dir` now
  std::vector<DirEntry> entries;
  absl::Status status;
  while (dirent* d = readdir(dir)) {
    std::string_view name(d->d_name);
    if (name == "." || name == "..") continue;
    if (entries.size() >= kMaxListEntries) {
      status = absl::ResourceExhaustedError(
          absl::StrCat(path, " has more than ", kMaxListEntries, " entries"));
      break;
    }
    struct stat st;
    if (fstatat(dirfd(dir), d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // vanished
    DirEntry e;
    e.name = std::string(name);
    e.type = S_ISREG(st.st_mode)   ? EntryType::kFile
             : S_ISDIR(st.st_mode) ? EntryType::kDir
             : S_ISLNK(st.st_mode) ? EntryType::kSymlink
                                   : EntryType::kOther;
    e.size = static_cast<uint64_t>(st.st_size);
    e.mode = st.st_mode & 07777;
    entries.push_back(std::move(e));
  }
  closedir(dir);
  if (!status.ok()) return SendRequestError(env, conn, status);
  std::sort(entries.begin(), entries.end(),
            [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  size_t pos = 0;
  do {
    DirEntries frame;
    size_t end = std::min(entries.size(), pos + kDirEntriesPerFrame);
    frame.entries.assign(std::make_move_iterator(entries.begin() + static_cast<ptrdiff_t>(pos)),
                         std::make_move_iterator(entries.begin() + static_cast<ptrdiff_t>(end)));
    frame.last = end == entries.size();
    pos = end;
    DSEC_RETURN_IF_ERROR(conn.Write(ToFrame(frame), env.WriteDeadline(), env.stop_fd));
  } while (pos < entries.size());
  return absl::OkStatus();
}

absl::Status HandlePackDiff(HandlerEnv& env, FrameConn& conn) {
  if (env.options.upper.empty()) {
    return SendRequestError(env, conn,
                            absl::FailedPreconditionError("this agent has no upper directory"));
  }
  ConnSink sink(env, conn);
  absl::StatusOr<DiffStats> stats = SendDiff(env.options.upper, sink);
  if (stats.ok()) return absl::OkStatus();
  if (!sink.failed().ok()) return sink.failed();
  // The walk failed mid-stream: the ERROR frame ends the stream for the host.
  return SendRequestError(env, conn, stats.status());
}

}  // namespace dsec::agent
