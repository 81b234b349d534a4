// SPDX-License-Identifier: Apache-2.0
// A running command's controls from other threads: stdin that streams in
// after the start, the end of stdin, and signals to this command alone.
// Whoever starts the command (the container tier, a client of the node's
// API) makes one and keeps a reference; the exec's loop serves it
// (WatchExecControl: its wake descriptor is one more watcher of the
// command's ExecPump) until the command ends.
#pragma once

#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/eventfd.h"
#include "base/exec_pump.h"

namespace dsec {

class ExecControl {
 public:
  // stdin_open: the command's stdin stays open after the request's initial
  // bytes until CloseStdin (else it is closed after them, as before).
  // max_pending_stdin: bytes written and not yet taken by the exec's loop
  // at most; a writer beyond it gets ResourceExhausted and retries.
  static absl::StatusOr<std::shared_ptr<ExecControl>> Create(bool stdin_open,
                                                             size_t max_pending_stdin = 1 << 20);

  bool stdin_open() const { return stdin_open_; }

  // Any thread. FailedPrecondition once stdin was closed or the command
  // ended; ResourceExhausted while too much waits.
  absl::Status WriteStdin(std::string_view bytes);
  // Any thread; idempotent. FailedPrecondition once the command ended.
  absl::Status CloseStdin();
  // Any thread: `sig` to this command (its process group). SIGKILL ends
  // it as its timeout would. FailedPrecondition once it ended;
  // InvalidArgument for a signal number out of range.
  absl::Status Signal(int sig);
  // Any thread: the command has been started (the exec's loop serves
  // this control from now on) and has not ended.
  bool running() const;
  bool ended() const;

  // --- The exec's side -----------------------------------------------------
  int wake_fd() const { return wake_.fd(); }
  struct Taken {
    std::string stdin_bytes;
    bool close_stdin = false;    // after stdin_bytes
    std::vector<int> signals;    // in the order sent
  };
  // What came since the last call: every signal, and at most
  // `max_stdin_bytes` of stdin (the close only once all of it is taken).
  Taken Take(size_t max_stdin_bytes);
  // Stdin is still waiting to be taken (the loop comes back for it).
  bool stdin_backlog() const;
  void MarkStarted();
  // The command ended: every later call fails.
  void MarkEnded();

 private:
  ExecControl(EventFd wake, bool stdin_open, size_t max_pending)
      : wake_(std::move(wake)), stdin_open_(stdin_open), max_pending_(max_pending) {}
  const EventFd wake_;
  const bool stdin_open_;
  const size_t max_pending_;
  mutable std::mutex mu_;
  std::string stdin_;              // guarded by mu_
  bool stdin_closed_ = false;      // guarded by mu_ (CloseStdin called)
  bool close_taken_ = false;       // guarded by mu_
  std::vector<int> signals_;       // guarded by mu_
  bool started_ = false;           // guarded by mu_
  bool ended_ = false;             // guarded by mu_
};

// Serves `control` in `pump`'s loop: stdin as the pipe takes it (back-
// pressure: nothing more is taken while the pump's stdin buffer is full),
// the end of stdin, SIGKILL as pump.Kill(kCaller), any other signal through
// `send_signal` (the caller's way to reach the command's process group).
// Marks the control started; the caller marks it ended when Run returns.
// Does nothing for a null control.
void WatchExecControl(ExecPump& pump, const std::shared_ptr<ExecControl>& control,
                      std::function<void(int sig)> send_signal);

}  // namespace dsec
