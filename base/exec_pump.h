// SPDX-License-Identifier: Apache-2.0
// The I/O loop of one running command, shared by every exec path (the
// container tier, fncall, the guest agent) and by the spawner of host
// programs (base/subprocess.h: captured output, deadline). It feeds the command's stdin
// from a buffer, reads its stdout and stderr through one OutputLimiter into
// a sink, kills it at its deadline, bounds the wait for the exit after a
// kill and the reading of the pipes after the exit, and serves the caller's
// own descriptors and timers (a control socket that reports the exit, a
// client connection) and an optional stop descriptor. What stays with each
// caller: how the command starts, how it is killed, how its exit is learnt,
// where its output goes and where its stdin comes from.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/clock.h"
#include "base/output_limiter.h"
#include "base/scoped_fd.h"

namespace dsec {

inline constexpr int64_t kExecNoDeadline = std::numeric_limits<int64_t>::max();

// Where admitted output goes.
class ExecOutputSink {
 public:
  virtual ~ExecOutputSink() = default;
  // `bytes` of `stream` (1 stdout, 2 stderr) that the limiter admitted, in
  // the order they were read; valid during the call. An error ends the pump.
  virtual absl::Status Write(int stream, std::string_view bytes) = 0;
  // False while the sink holds all it may: the pump stops reading the pipes
  // (the command then blocks on a full pipe: back-pressure, not loss) until
  // a watcher of the caller's has made room.
  virtual bool HasRoom() const { return true; }
};

// Keeps each stream in a string; hands each piece to `on_output` (if set)
// once it is kept. The callback runs inside the pump's loop, so the
// deadline, the kill and stdin wait while it runs: it must return promptly.
class StringOutputSink final : public ExecOutputSink {
 public:
  using Callback = std::function<void(int stream, std::string_view bytes)>;
  StringOutputSink(std::string* out, std::string* err, Callback on_output = nullptr)
      : out_(out), err_(err), on_output_(std::move(on_output)) {}
  absl::Status Write(int stream, std::string_view bytes) override;

 private:
  std::string* out_;
  std::string* err_;
  Callback on_output_;
};

struct ExecPumpOptions {
  // The pump's time (deadlines, the limiter's bucket); must outlive it.
  const Clock* clock = &MonotonicClock::Get();
  uint64_t output_cap_bytes = 0;         // stdout + stderr kept at most; 0 = no cap
  uint64_t output_rate_bytes_per_s = 0;  // token bucket over both; 0 = no limit
  // Kill (ExecKill::kOutput) once this many bytes were dropped, over the cap
  // or the rate; 0 = never.
  uint64_t kill_after_dropped_bytes = 0;
  // Kill (ExecKill::kOutput) as soon as the cap drops a byte.
  bool kill_at_cap = false;
  // On the clock: then the command is killed (ExecKill::kTimeout).
  int64_t deadline_ns = kExecNoDeadline;
  // After a kill the exit must be learnt within this long, else Run fails
  // (Internal: whoever reports the exit is stuck).
  int64_t exit_grace_ns = kExecNoDeadline;
  // After the exit, the pipes are read until EOF but at most this long, and
  // at most `drain_after_kill_ns` past a kill: processes left behind that
  // hold the pipes open do not hold the exec.
  int64_t drain_after_exit_ns = 1'000'000'000;
  int64_t drain_after_kill_ns = kExecNoDeadline;
  // Readable: Run stops with Cancelled (a server's shutdown). -1: none.
  int stop_fd = -1;
  // stdin_full() from this many buffered bytes: a streaming source pauses.
  size_t stdin_buffer_bytes = 1 << 20;
};

enum class ExecKill { kNone, kTimeout, kOutput, kCaller };

// Threads: one thread (the exec's) makes every call and runs the loop; the
// callbacks run on it. Bounded by the exec: make one per command.
class ExecPump {
 public:
  // A descriptor or timer of the caller's, served by the loop. Before each
  // wait `prepare(now)` says what to watch; `ready(revents, now)` runs when
  // the descriptor reported (revents) or the wake time passed (revents 0).
  // An error from `ready` ends Run with it.
  struct Interest {
    int fd = -1;       // -1: none this round
    short events = 0;  // poll(2) events
    int64_t wake_ns = kExecNoDeadline;
  };
  using Prepare = std::function<Interest(int64_t now_ns)>;
  using Ready = std::function<absl::Status(short revents, int64_t now_ns)>;

  // Takes the runtime's ends of the command's pipes (any may be invalid:
  // no stdin, a stream not captured) and makes them non-blocking. `kill`
  // kills the command (and whatever the caller counts as its own); the pump
  // calls it at most once. `sink` must outlive the pump.
  ExecPump(const ExecPumpOptions& options, ScopedFd stdin_write, ScopedFd stdout_read,
           ScopedFd stderr_read, ExecOutputSink* sink, std::function<void()> kill);
  ExecPump(const ExecPump&) = delete;
  ExecPump& operator=(const ExecPump&) = delete;

  // Served in the order added, before the pipes of the same round. Call
  // before Run.
  void Watch(Prepare prepare, Ready ready);

  // Stdin: bytes are written as the pipe takes them; CloseStdin closes it
  // once they are. Bytes for a closed stdin (the command closed it, exited,
  // or stdin was closed) are dropped.
  void AppendStdin(std::string_view data);
  void CloseStdin();
  bool stdin_full() const {
    return stdin_pending_.size() - stdin_off_ >= options_.stdin_buffer_bytes;
  }

  // The command has exited (a watcher learnt it): its pipes are read until
  // EOF or the drain bound, and stdin is closed.
  void MarkExited();
  // Its exit can no longer be learnt (whoever reports it is gone): Run ends
  // once the pipes reach EOF, with exited() false.
  void MarkExitUnknown() { exit_unknown_ = true; }
  // Kills now (a limit the caller watches). False (and nothing done) once
  // the command was killed or has exited.
  bool Kill(ExecKill reason = ExecKill::kCaller);

  // Runs (once) until the command has exited and its output is read (or
  // the drain bound passed). Errors: Internal (no exit within exit_grace_ns of a kill,
  // or poll failed), Cancelled (stop_fd), or a sink's or watcher's error;
  // after an error a command that has not exited is killed (kCaller).
  absl::Status Run();

  bool exited() const { return exited_; }
  int64_t exit_ns() const { return exit_ns_; }
  bool killed() const { return kill_reason_ != ExecKill::kNone; }
  ExecKill kill_reason() const { return kill_reason_; }
  bool timed_out() const { return kill_reason_ == ExecKill::kTimeout; }
  // Per stream (1 stdout, 2 stderr): what reached the sink, what was dropped.
  uint64_t kept_bytes(int stream) const { return kept_[stream == 2]; }
  uint64_t dropped_bytes(int stream) const { return dropped_[stream == 2]; }
  uint64_t dropped_bytes() const { return limiter_.dropped_bytes(); }

 private:
  struct Watcher {
    Prepare prepare;
    Ready ready;
  };
  absl::Status Loop();
  int64_t DrainEnd() const;
  int64_t NextWake() const;
  void WriteStdin();
  absl::Status ReadOutput(int stream);

  const ExecPumpOptions options_;
  const Clock& clock_;
  ExecOutputSink& sink_;
  std::function<void()> kill_;
  OutputLimiter limiter_;
  ScopedFd stdin_;
  ScopedFd output_[2];  // stdout, stderr
  std::vector<Watcher> watchers_;
  std::string stdin_pending_;  // bytes from stdin_off_ on are still to write
  size_t stdin_off_ = 0;
  bool stdin_eof_ = false;
  std::string chunk_;  // the limiter's admitted bytes of one read (reused)
  uint64_t kept_[2] = {0, 0};
  uint64_t dropped_[2] = {0, 0};
  ExecKill kill_reason_ = ExecKill::kNone;
  int64_t kill_ns_ = 0;
  bool exited_ = false;
  bool exit_unknown_ = false;
  int64_t exit_ns_ = 0;
};

// A pipe(2) made close-on-exec, as every exec path makes for a command's
// stdin, stdout and stderr.
struct Pipe {
  ScopedFd read, write;
  static absl::StatusOr<Pipe> Create();
};

// write(2) to a pipe whose reader may be gone, without raising SIGPIPE in
// this process: SIGPIPE is blocked on the calling thread and a pending one
// consumed; EPIPE is returned as errno.
ssize_t WriteNoSigpipe(int fd, const char* data, size_t len);

}  // namespace dsec
