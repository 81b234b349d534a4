// SPDX-License-Identifier: Apache-2.0
// EXEC: runs one command and streams its output. One loop on the
// connection's thread (base/exec_pump.h) multiplexes the socket (STDIN frames
// in, OUTPUT frames out), the command's stdout/stderr pipes, its stdin pipe,
// its exit and the server's stop signal. Nothing blocks the loop: socket
// writes are buffered (reading the pipes pauses while the buffer is full,
// which throttles the command, not the loop), and stdin is buffered up to a
// bound (reading the socket pauses beyond it).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "guest-kernel/agent/handlers.h"
#include "guest-kernel/agent/process_tree.h"
#include "base/clock.h"
#include "base/exec_pump.h"
#include "base/status.h"

namespace dsec::agent {

namespace {

constexpr size_t kMaxQueuedOutput = 1u << 20;
constexpr size_t kMaxPendingStdin = 1u << 20;
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

// One EXEC on its connection. The pump (base/exec_pump.h) runs the
// command's pipes, deadline and drain; this class is the connection's side
// of it: output becomes OUTPUT frames (queued, flushed as the socket takes
// them; the pump stops reading the pipes while kMaxQueuedOutput is queued),
// STDIN frames become stdin (the socket is not read while kMaxPendingStdin
// waits), and the command is spawned, awaited and killed as a tree.
class ExecRun final : public ExecOutputSink {
 public:
  ExecRun(HandlerEnv& env, FrameConn& conn, const ExecRequest& req, ExecSlot& slot)
      : env_(env), conn_(conn), req_(req), slot_(slot) {}

  absl::Status Run() {
    DSEC_ASSIGN_OR_RETURN(Pipe out, Pipe::Create());
    DSEC_ASSIGN_OR_RETURN(Pipe err, Pipe::Create());
    Pipe in;
    if (req_.stdin) {
      DSEC_ASSIGN_OR_RETURN(in, Pipe::Create());
    } else {
      in.read = ScopedFd(open("/dev/null", O_RDONLY | O_CLOEXEC));
      if (!in.read) {  // no /dev/null (early boot): an empty, closed pipe
        DSEC_ASSIGN_OR_RETURN(in, Pipe::Create());
        in.write.Reset();
      }
    }
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
    stdin_open_ = req_.stdin;
    ExecStarted started;
    started.pid = child_->pid();
    DSEC_RETURN_IF_ERROR(conn_.Queue(ToFrame(started)));

    // The pipes close with the pump, before the host learns the end.
    absl::StatusOr<ExecDone> done =
        Pump(std::move(in.write), std::move(out.read), std::move(err.read));
    if (!done.ok()) return done.status();
    // Free the slot before the host learns that the command ended, so that
    // its next EXEC never races with our bookkeeping.
    slot_.Release();
    DSEC_RETURN_IF_ERROR(conn_.Queue(ToFrame(*done)));
    return conn_.Flush(env_.WriteDeadline(), env_.stop_fd, /*read_while_waiting=*/false);
  }

  // ExecOutputSink: each admitted piece is sent as soon as it is read.
  absl::Status Write(int stream, std::string_view bytes) override {
    // A stall counts from when output starts to wait, not from the last
    // time some did.
    if (conn_.queued_bytes() == 0) last_write_progress_ = MonotonicNowNs();
    OutputChunk chunk;
    chunk.stream = stream;
    chunk.data.assign(bytes.data(), bytes.size());
    DSEC_RETURN_IF_ERROR(conn_.Queue(ToFrame(chunk)));
    return FlushOutput();
  }
  bool HasRoom() const override { return conn_.queued_bytes() < kMaxQueuedOutput; }

 private:
  absl::StatusOr<ExecDone> Pump(ScopedFd stdin_write, ScopedFd stdout_read, ScopedFd stderr_read) {
    ExecPumpOptions o;
    o.output_cap_bytes = req_.output_cap_bytes;
    o.output_rate_bytes_per_s = req_.output_rate_bytes_per_s;
    o.kill_after_dropped_bytes = req_.kill_after_dropped_bytes;
    // Timeouts are capped at 2^40 ms (35 years), which keeps the sum in range.
    const int64_t timeout_ms =
        static_cast<int64_t>(std::min<uint64_t>(req_.timeout_ms, 1ull << 40));
    o.deadline_ns = timeout_ms == 0 ? kExecNoDeadline : start_ns_ + timeout_ms * 1'000'000;
    o.drain_after_exit_ns = env_.options.post_exit_drain_ms * 1'000'000;
    o.drain_after_kill_ns = kKillDrainMs * 1'000'000;
    o.stop_fd = env_.stop_fd;
    o.stdin_buffer_bytes = kMaxPendingStdin;
    ExecPump pump(o, std::move(stdin_write), std::move(stdout_read), std::move(stderr_read), this,
                  [this] { KillExecTree(child_->pid(), child_->Unreaped(), pipe_inodes_); });
    pump_ = &pump;
    pump.Watch([this](int64_t now) { return ConnInterest(now); },
               [this](short revents, int64_t now) { return ConnReady(revents, now); });
    pump.Watch(
        [this](int64_t) {
          return ExecPump::Interest{pump_->exited() ? -1 : child_->wait_fd(), POLLIN};
        },
        [this](short, int64_t) -> absl::Status {
          DSEC_ASSIGN_OR_RETURN(std::optional<ChildStatus> st, child_->TryCollect());
          if (st.has_value()) {
            status_ = *st;
            end_ns_ = MonotonicNowNs();
            pump_->MarkExited();
          }
          return absl::OkStatus();
        });
    last_write_progress_ = MonotonicNowNs();
    absl::Status loop = pump.Run();
    pump_ = nullptr;
    env_.metrics.output_bytes_dropped.fetch_add(pump.dropped_bytes());
    if (pump.kill_reason() == ExecKill::kTimeout) env_.metrics.execs_timed_out.fetch_add(1);
    if (pump.kill_reason() == ExecKill::kOutput) env_.metrics.execs_killed_by_output.fetch_add(1);
    // The connection is going away (or the server stops): nobody will read
    // the result, and the pump has killed the command.
    if (!loop.ok()) return loop;

    ExecDone done;
    if (pump.exited()) {
      done.exit_code = status_.exit_code;
      done.signal = status_.signal;
      done.peak_rss_kib = status_.maxrss_kib;
    } else {
      // The drain bound cannot pass before the exit (it counts from it), so
      // this is unreachable; keep the message well-formed.
      done.signal = 9;
    }
    done.timed_out = pump.timed_out();
    if (pump.kill_reason() == ExecKill::kTimeout) done.killed_by = "timeout";
    if (pump.kill_reason() == ExecKill::kOutput) done.killed_by = "output";
    done.stdout_bytes = pump.kept_bytes(1);
    done.stderr_bytes = pump.kept_bytes(2);
    done.stdout_dropped = pump.dropped_bytes(1);
    done.stderr_dropped = pump.dropped_bytes(2);
    done.duration_ms = ((pump.exited() ? end_ns_ : MonotonicNowNs()) - start_ns_) / 1'000'000;
    return done;
  }

  int64_t StallNs() const { return env_.options.write_stall_timeout_ms * 1'000'000; }

  ExecPump::Interest ConnInterest(int64_t) const {
    ExecPump::Interest in{conn_.fd(), POLLRDHUP};
    if (!conn_.peer_closed() && !pump_->stdin_full()) in.events |= POLLIN;
    if (conn_.queued_bytes() > 0) {
      in.events |= POLLOUT;
      in.wake_ns = last_write_progress_ + StallNs();
    }
    return in;
  }

  absl::Status ConnReady(short revents, int64_t now) {
    if (conn_.queued_bytes() > 0 && now - last_write_progress_ >= StallNs()) {
      return absl::DeadlineExceededError("exec: the host stopped reading output");
    }
    if ((revents & POLLOUT) != 0) DSEC_RETURN_IF_ERROR(FlushOutput());
    if ((revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0) {
      DSEC_RETURN_IF_ERROR(conn_.ReadSome());
      DSEC_RETURN_IF_ERROR(TakeFrames());
      if (conn_.peer_closed()) return absl::UnavailableError("host closed the connection");
    }
    return absl::OkStatus();
  }

  absl::Status FlushOutput() {
    const size_t before = conn_.queued_bytes();
    DSEC_RETURN_IF_ERROR(conn_.FlushSome());
    if (conn_.queued_bytes() < before) last_write_progress_ = MonotonicNowNs();
    return absl::OkStatus();
  }

  absl::Status TakeFrames() {
    for (;;) {
      DSEC_ASSIGN_OR_RETURN(std::optional<Frame> f, conn_.Pop());
      if (!f.has_value()) return absl::OkStatus();
      if (f->type == MsgType::kStdin) {
        if (!stdin_open_) {
          return absl::InvalidArgumentError("protocol: STDIN without an open stdin stream");
        }
        pump_->AppendStdin(f->payload);  // dropped if the command is gone
      } else if (f->type == MsgType::kStdinClose) {
        DSEC_RETURN_IF_ERROR(CheckEmptyObject(*f));
        if (!stdin_open_)
          return absl::InvalidArgumentError("protocol: STDIN_CLOSE twice or without stdin");
        stdin_open_ = false;
        pump_->CloseStdin();
      } else if (f->type == MsgType::kSignal) {
        SignalRequest sig;
        DSEC_RETURN_IF_ERROR(FromFrame(*f, &sig));
        if (sig.signal == SIGKILL) {
          (void)pump_->Kill(ExecKill::kCaller);  // the whole tree, as the timeout's kill
        } else if (!pump_->exited() && child_->Unreaped()) {
          ::kill(-child_->pid(), sig.signal);  // its process group (it leads a session)
        }
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("protocol: ", TypeName(f->type), " while a command runs"));
      }
    }
  }

  HandlerEnv& env_;
  FrameConn& conn_;
  const ExecRequest& req_;
  ExecSlot& slot_;
  ExecPump* pump_ = nullptr;  // while Pump() runs
  std::unique_ptr<Child> child_;
  std::vector<ino_t> pipe_inodes_;
  bool stdin_open_ = false;
  ChildStatus status_;
  int64_t start_ns_ = 0;
  int64_t end_ns_ = 0;
  int64_t last_write_progress_ = 0;
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
