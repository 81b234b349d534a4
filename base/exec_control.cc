// SPDX-License-Identifier: Apache-2.0
#include "base/exec_control.h"

#include <sys/eventfd.h>

#include <algorithm>

namespace dsec {

absl::StatusOr<std::shared_ptr<ExecControl>> ExecControl::Create(bool stdin_open,
                                                                  size_t max_pending_stdin) {
  absl::StatusOr<EventFd> wake = EventFd::Create(EFD_NONBLOCK);
  if (!wake.ok()) return wake.status();
  return std::shared_ptr<ExecControl>(new ExecControl(std::move(*wake), stdin_open, max_pending_stdin));
}

absl::Status ExecControl::WriteStdin(std::string_view bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return absl::FailedPreconditionError("the command has ended");
    if (!stdin_open_ || stdin_closed_) return absl::FailedPreconditionError("the command's stdin is closed");
    if (stdin_.size() + bytes.size() > max_pending_) {
      return absl::ResourceExhaustedError("the command has not read the stdin sent before: retry later");
    }
    stdin_.append(bytes);
  }
  return wake_.Signal();
}

absl::Status ExecControl::CloseStdin() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return absl::FailedPreconditionError("the command has ended");
    stdin_closed_ = true;
  }
  return wake_.Signal();
}

absl::Status ExecControl::Signal(int sig) {
  if (sig <= 0 || sig >= NSIG) return absl::InvalidArgumentError("no such signal");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return absl::FailedPreconditionError("the command has ended");
    signals_.push_back(sig);
  }
  return wake_.Signal();
}

bool ExecControl::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return started_ && !ended_;
}

bool ExecControl::ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_;
}

ExecControl::Taken ExecControl::Take(size_t max_stdin_bytes) {
  (void)wake_.Consume();
  std::lock_guard<std::mutex> lock(mu_);
  Taken t;
  t.signals.swap(signals_);
  const size_t n = std::min(max_stdin_bytes, stdin_.size());
  t.stdin_bytes = stdin_.substr(0, n);
  stdin_.erase(0, n);
  if (stdin_closed_ && stdin_.empty() && !close_taken_) {
    close_taken_ = true;
    t.close_stdin = true;
  }
  return t;
}

bool ExecControl::stdin_backlog() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !stdin_.empty() || (stdin_closed_ && !close_taken_);
}

void ExecControl::MarkStarted() {
  std::lock_guard<std::mutex> lock(mu_);
  started_ = true;
}

void ExecControl::MarkEnded() {
  std::lock_guard<std::mutex> lock(mu_);
  ended_ = true;
  stdin_.clear();
  signals_.clear();
}

void WatchExecControl(ExecPump& pump, const std::shared_ptr<ExecControl>& control,
                      std::function<void(int sig)> send_signal) {
  if (control == nullptr) return;
  // Stdin waiting while the pump's buffer is full is looked at again after
  // this long (the wake descriptor says nothing new then).
  constexpr int64_t kBacklogRetryNs = 5'000'000;
  ExecControl* c = control.get();
  pump.Watch(
      [c, &pump](int64_t now) {
        ExecPump::Interest in{c->wake_fd(), POLLIN};
        if (pump.stdin_full() && c->stdin_backlog()) in.wake_ns = now + kBacklogRetryNs;
        return in;
      },
      [c, &pump, send_signal = std::move(send_signal)](short, int64_t) {
        constexpr size_t kTakeAtMost = 256 << 10;
        ExecControl::Taken t = c->Take(pump.stdin_full() ? 0 : kTakeAtMost);
        if (!t.stdin_bytes.empty()) pump.AppendStdin(t.stdin_bytes);
        if (t.close_stdin) pump.CloseStdin();
        for (int sig : t.signals) {
          if (sig == SIGKILL) {
            pump.Kill(ExecKill::kCaller);
          } else if (send_signal && !pump.exited()) {
            send_signal(sig);
          }
        }
        return absl::OkStatus();
      });
  c->MarkStarted();
}

}  // namespace dsec
