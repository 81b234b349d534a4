// SPDX-License-Identifier: Apache-2.0
// EXEC: runs one command and streams its output. One poll loop on the
// connection's thread multiplexes the socket (STDIN frames in, OUTPUT frames
// out), the command's stdout/stderr pipes, its stdin pipe, its exit and the
// server's stop signal. Nothing blocks the loop: socket writes are buffered
// (reading the pipes pauses while the buffer is full, which throttles the
// command, not the loop), and stdin is buffered up to a bound (reading the
// socket pauses beyond it).
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "guest-kernel/agent/handlers.h"
#include "guest-kernel/agent/process_tree.h"
#include "base/output_limiter.h"
#include "base/clock.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::agent {

namespace {

constexpr size_t kMaxQueuedOutput = 1u << 20;
constexpr size_t kMaxPendingStdin = 1u << 20;
constexpr size_t kPipeReadBytes = 64u << 10;
// After a kill, how long the pipes may still take to reach EOF.
constexpr int64_t kKillDrainMs = 2'000;
constexpr size_t kMaxArgs = 65'536;

bool HasNul(const std::string& s) { return s.find('\0') != std::string::npos; }

absl::Status ValidateExec(const ExecRequest& req) {
  if (req.argv.empty() || req.argv[0].empty())
    return absl::InvalidArgumentError("exec: empty argv");
  if (req.argv.size() > kMaxArgs || req.env.size() > kMaxArgs) {
    return absl::InvalidArgumentError("exec: too many arguments or variables");
  }
  for (const std::string& a : req.argv) {
    if (HasNul(a)) return absl::InvalidArgumentError("exec: argument holds NUL");
  }
  for (const auto& [k, v] : req.env) {
    if (k.empty() || k.find('=') != std::string::npos || HasNul(k) || HasNul(v)) {
      return absl::InvalidArgumentError(absl::StrCat("exec: invalid environment variable ", k));
    }
  }
  if (HasNul(req.cwd)) return absl::InvalidArgumentError("exec: cwd holds NUL");
  return absl::OkStatus();
}

struct Pipe {
  ScopedFd read;
  ScopedFd write;
};

absl::StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoToStatus("pipe2");
  return Pipe{ScopedFd(fds[0]), ScopedFd(fds[1])};
}

void SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

ino_t InodeOf(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

class ExecSlot {
 public:
  ExecSlot(std::atomic<size_t>& active, size_t max) : active_(active) {
    size_t now = active_.fetch_add(1);
    ok_ = now < max;
    if (!ok_) active_.fetch_sub(1);
  }
  ~ExecSlot() { Release(); }
  bool ok() const { return ok_; }
  void Release() {
    if (ok_) active_.fetch_sub(1);
    ok_ = false;
  }

 private:
  std::atomic<size_t>& active_;
  bool ok_;
};

class ExecRun {
 public:
  ExecRun(HandlerEnv& env, FrameConn& conn, const ExecRequest& req, ExecSlot& slot)
      : env_(env),
        conn_(conn),
        req_(req),
        slot_(slot),
        limiter_(req.output_cap_bytes, req.output_rate_bytes_per_s, &MonotonicClock::Get()) {}

  absl::Status Run() {
    DSEC_ASSIGN_OR_RETURN(Pipe out, MakePipe());
    DSEC_ASSIGN_OR_RETURN(Pipe err, MakePipe());
    Pipe in;
    if (req_.stdin) {
      DSEC_ASSIGN_OR_RETURN(in, MakePipe());
      SetNonBlocking(in.write.get());
    } else {
      in.read = ScopedFd(open("/dev/null", O_RDONLY | O_CLOEXEC));
      if (!in.read) {  // no /dev/null (early boot): an empty, closed pipe
        DSEC_ASSIGN_OR_RETURN(in, MakePipe());
        in.write.Reset();
      }
    }
    SetNonBlocking(out.read.get());
    SetNonBlocking(err.read.get());
    pipe_inodes_ = {InodeOf(out.read.get()), InodeOf(err.read.get())};
    if (req_.stdin) pipe_inodes_.push_back(InodeOf(in.read.get()));

    SpawnSpec spec;
    spec.argv = req_.argv;
    std::map<std::string, std::string> env;
    for (const std::string& kv : env_.options.base_env) {
      size_t eq = kv.find('=');
      if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    for (const auto& [k, v] : req_.env) env[k] = v;
    for (const auto& [k, v] : env) spec.env.push_back(absl::StrCat(k, "=", v));
    if (auto it = env.find("PATH"); it != env.end()) spec.search_path = it->second;
    spec.cwd = req_.cwd.empty() ? env_.options.root : req_.cwd;
    spec.stdin_fd = in.read.get();
    spec.stdout_fd = out.write.get();
    spec.stderr_fd = err.write.get();
    spec.new_session = true;

    start_ns_ = MonotonicNowNs();
    absl::StatusOr<std::unique_ptr<Child>> child = env_.launcher.Spawn(spec);
    if (!child.ok()) {
      slot_.Release();
      return SendRequestError(env_, conn_, child.status());
    }
    child_ = *std::move(child);
    env_.metrics.execs.fetch_add(1);
    in.read.Reset();
    out.write.Reset();
    err.write.Reset();
    out_ = std::move(out.read);
    err_ = std::move(err.read);
    stdin_ = std::move(in.write);
    stdin_open_ = req_.stdin;
    ExecStarted started;
    started.pid = child_->pid();
    DSEC_RETURN_IF_ERROR(conn_.Queue(ToFrame(started)));

    absl::Status loop = Loop();
    if (!loop.ok()) {
      // The connection is going away (or the server stops): nobody will read
      // the result, so the command must not outlive it.
      if (!exited_) Kill();
      return loop;
    }
    return Finish();
  }

 private:
  void Kill() {
    KillExecTree(child_->pid(), child_->Unreaped(), pipe_inodes_);
    killed_ = true;
    drain_deadline_ = std::min(drain_deadline_, MonotonicNowNs() + kKillDrainMs * 1'000'000);
  }

  absl::Status Loop() {
    // Timeouts are capped at 2^40 ms (35 years), which keeps the sum in range.
    const int64_t timeout_ms =
        static_cast<int64_t>(std::min<uint64_t>(req_.timeout_ms, 1ull << 40));
    const int64_t deadline = timeout_ms == 0 ? kNoDeadline : start_ns_ + timeout_ms * 1'000'000;
    int64_t last_write_progress = MonotonicNowNs();
    for (;;) {
      if (exited_ && !out_ && !err_) return absl::OkStatus();
      int64_t now = MonotonicNowNs();
      if (exited_ && now >= drain_deadline_) return absl::OkStatus();
      if (!exited_ && !killed_ && now >= deadline) {
        timed_out_ = true;
        killed_by_ = "timeout";
        env_.metrics.execs_timed_out.fetch_add(1);
        Kill();
      }
      if (conn_.queued_bytes() > 0 &&
          now - last_write_progress > env_.options.write_stall_timeout_ms * 1'000'000) {
        return absl::DeadlineExceededError("exec: the host stopped reading output");
      }

      enum { kConn, kOut, kErr, kIn, kChild, kStop, kCount };
      pollfd fds[kCount] = {};
      for (auto& p : fds) p.fd = -1;
      fds[kConn].fd = conn_.fd();
      fds[kConn].events = POLLRDHUP;
      if (!conn_.peer_closed() && stdin_pending_.size() < kMaxPendingStdin) {
        fds[kConn].events |= POLLIN;
      }
      if (conn_.queued_bytes() > 0) fds[kConn].events |= POLLOUT;
      bool room = conn_.queued_bytes() < kMaxQueuedOutput;
      if (out_ && room) fds[kOut] = {out_.get(), POLLIN, 0};
      if (err_ && room) fds[kErr] = {err_.get(), POLLIN, 0};
      if (stdin_ && !stdin_pending_.empty()) fds[kIn] = {stdin_.get(), POLLOUT, 0};
      if (!exited_) fds[kChild] = {child_->wait_fd(), POLLIN, 0};
      fds[kStop] = {env_.stop_fd, POLLIN, 0};

      int64_t wake = exited_ ? drain_deadline_ : (killed_ ? kNoDeadline : deadline);
      if (conn_.queued_bytes() > 0) {
        wake =
            std::min(wake, last_write_progress + env_.options.write_stall_timeout_ms * 1'000'000);
      }
      int poll_ms = -1;
      if (wake != kNoDeadline) {
        // Rounded up, so we never wake just before the deadline and spin.
        int64_t ms = (wake - now + 999'999) / 1'000'000;
        poll_ms = static_cast<int>(std::clamp<int64_t>(ms, 0, 3'600'000));
      }
      int n = poll(fds, kCount, poll_ms);
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("poll");
      }
      if (fds[kStop].revents != 0) return absl::CancelledError("server stopping");

      if ((fds[kConn].revents & POLLOUT) != 0) {
        size_t before = conn_.queued_bytes();
        DSEC_RETURN_IF_ERROR(conn_.FlushSome());
        if (conn_.queued_bytes() < before) last_write_progress = MonotonicNowNs();
      }
      if ((fds[kConn].revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0) {
        DSEC_RETURN_IF_ERROR(conn_.ReadSome());
        DSEC_RETURN_IF_ERROR(TakeFrames());
        if (conn_.peer_closed()) return absl::UnavailableError("host closed the connection");
      }
      if (fds[kIn].revents != 0) WriteStdin();
      if (fds[kOut].revents != 0) DSEC_RETURN_IF_ERROR(ReadOutput(out_, 1));
      if (fds[kErr].revents != 0) DSEC_RETURN_IF_ERROR(ReadOutput(err_, 2));
      if (!exited_ && fds[kChild].revents != 0) {
        DSEC_ASSIGN_OR_RETURN(std::optional<ChildStatus> st, child_->TryCollect());
        if (st.has_value()) {
          status_ = *st;
          exited_ = true;
          end_ns_ = MonotonicNowNs();
          drain_deadline_ =
              std::min(drain_deadline_, end_ns_ + env_.options.post_exit_drain_ms * 1'000'000);
          stdin_.Reset();
          stdin_pending_.clear();
        }
      }
    }
  }

  absl::Status TakeFrames() {
    for (;;) {
      DSEC_ASSIGN_OR_RETURN(std::optional<Frame> f, conn_.Pop());
      if (!f.has_value()) return absl::OkStatus();
      if (f->type == MsgType::kStdin) {
        if (!stdin_open_) {
          return absl::InvalidArgumentError("protocol: STDIN without an open stdin stream");
        }
        if (stdin_) stdin_pending_.append(f->payload);  // else the command is gone: dropped
        WriteStdin();
      } else if (f->type == MsgType::kStdinClose) {
        DSEC_RETURN_IF_ERROR(CheckEmptyObject(*f));
        if (!stdin_open_)
          return absl::InvalidArgumentError("protocol: STDIN_CLOSE twice or without stdin");
        stdin_open_ = false;
        WriteStdin();
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("protocol: ", TypeName(f->type), " while a command runs"));
      }
    }
  }

  void WriteStdin() {
    while (stdin_ && !stdin_pending_.empty()) {
      ssize_t n = write(stdin_.get(), stdin_pending_.data(), stdin_pending_.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return;
        // EPIPE (the command closed its stdin; SIGPIPE is blocked on this
        // thread) or worse: nobody will read the rest.
        stdin_.Reset();
        stdin_pending_.clear();
        return;
      }
      stdin_pending_.erase(0, static_cast<size_t>(n));
    }
    if (stdin_ && stdin_pending_.empty() && !stdin_open_) stdin_.Reset();
  }

  absl::Status ReadOutput(ScopedFd& fd, int stream) {
    char buf[kPipeReadBytes];
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) return absl::OkStatus();
      fd.Reset();
      return absl::OkStatus();
    }
    if (n == 0) {
      fd.Reset();
      return absl::OkStatus();
    }
    uint64_t dropped_before = limiter_.dropped_bytes();
    OutputChunk chunk;
    chunk.stream = stream;
    limiter_.Admit(std::string_view(buf, static_cast<size_t>(n)), &chunk.data);
    uint64_t dropped = limiter_.dropped_bytes() - dropped_before;
    (stream == 1 ? stdout_dropped_ : stderr_dropped_) += dropped;
    env_.metrics.output_bytes_dropped.fetch_add(dropped);
    if (!chunk.data.empty()) {
      (stream == 1 ? stdout_bytes_ : stderr_bytes_) += chunk.data.size();
      DSEC_RETURN_IF_ERROR(conn_.Queue(ToFrame(chunk)));
      DSEC_RETURN_IF_ERROR(conn_.FlushSome());  // as soon as it is read
    }
    if (req_.kill_after_dropped_bytes != 0 && !killed_ && !exited_ &&
        limiter_.dropped_bytes() >= req_.kill_after_dropped_bytes) {
      killed_by_ = "output";
      env_.metrics.execs_killed_by_output.fetch_add(1);
      Kill();
    }
    return absl::OkStatus();
  }

  absl::Status Finish() {
    out_.Reset();
    err_.Reset();
    // Free the slot before the host learns that the command ended, so that
    // its next EXEC never races with our bookkeeping.
    slot_.Release();
    ExecDone done;
    if (exited_) {
      done.exit_code = status_.exit_code;
      done.signal = status_.signal;
      done.peak_rss_kib = status_.maxrss_kib;
    } else {
      // The drain deadline cannot pass before the exit (it is only set by
      // the exit), so this is unreachable; keep the message well-formed.
      done.signal = 9;
    }
    done.timed_out = timed_out_;
    done.killed_by = killed_by_;
    done.stdout_bytes = stdout_bytes_;
    done.stderr_bytes = stderr_bytes_;
    done.stdout_dropped = stdout_dropped_;
    done.stderr_dropped = stderr_dropped_;
    done.duration_ms = ((exited_ ? end_ns_ : MonotonicNowNs()) - start_ns_) / 1'000'000;
    DSEC_RETURN_IF_ERROR(conn_.Queue(ToFrame(done)));
    return conn_.Flush(env_.WriteDeadline(), env_.stop_fd, /*read_while_waiting=*/false);
  }

  HandlerEnv& env_;
  FrameConn& conn_;
  const ExecRequest& req_;
  ExecSlot& slot_;
  OutputLimiter limiter_;
  std::unique_ptr<Child> child_;
  std::vector<ino_t> pipe_inodes_;
  ScopedFd out_, err_, stdin_;
  std::string stdin_pending_;
  bool stdin_open_ = false;
  bool exited_ = false;
  bool killed_ = false;
  bool timed_out_ = false;
  std::string killed_by_;
  ChildStatus status_;
  int64_t start_ns_ = 0;
  int64_t end_ns_ = 0;
  int64_t drain_deadline_ = kNoDeadline;
  uint64_t stdout_bytes_ = 0, stderr_bytes_ = 0, stdout_dropped_ = 0, stderr_dropped_ = 0;
};

}  // namespace

absl::Status HandleExec(HandlerEnv& env, FrameConn& conn, const ExecRequest& req) {
  if (absl::Status s = ValidateExec(req); !s.ok()) return SendRequestError(env, conn, s);
  ExecSlot slot(env.active_execs, env.options.max_concurrent_execs);
  if (!slot.ok()) {
    env.metrics.execs_refused.fetch_add(1);
    return SendRequestError(
        env, conn,
        absl::ResourceExhaustedError(
            absl::StrCat("exec: ", env.options.max_concurrent_execs, " commands already running")));
  }
  ExecRun run(env, conn, req, slot);
  return run.Run();
}

}  // namespace dsec::agent
