// SPDX-License-Identifier: Apache-2.0
#include "base/exec_pump.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace dsec {

namespace {

// One read(2) of a pipe; a pipe holds 64 KiB by default.
constexpr size_t kReadBytes = 64 << 10;
// Reads of one stream per round, so that a flood cannot keep the loop from
// its deadlines and its other descriptors.
constexpr int kMaxReadsPerRound = 16;

int64_t SaturatingAdd(int64_t a, int64_t b) {
  return a > kExecNoDeadline - b ? kExecNoDeadline : a + b;
}

void SetNonBlocking(const ScopedFd& fd) {
  if (!fd) return;
  int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags >= 0) ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK);
}

}  // namespace

absl::StatusOr<Pipe> Pipe::Create() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoToStatus("pipe2");
  return Pipe{ScopedFd(fds[0]), ScopedFd(fds[1])};
}

ssize_t WriteNoSigpipe(int fd, const char* data, size_t len) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  ssize_t n = ::write(fd, data, len);
  int err = errno;
  if (n < 0 && err == EPIPE) {
    timespec zero{0, 0};
    sigtimedwait(&pipe_set, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = err;
  return n;
}

absl::Status StringOutputSink::Write(int stream, std::string_view bytes) {
  (stream == 2 ? err_ : out_)->append(bytes);
  if (on_output_) on_output_(stream, bytes);
  return absl::OkStatus();
}

ExecPump::ExecPump(const ExecPumpOptions& options, ScopedFd stdin_write, ScopedFd stdout_read,
                   ScopedFd stderr_read, ExecOutputSink* sink, std::function<void()> kill)
    : options_(options),
      clock_(*options.clock),
      sink_(*sink),
      kill_(std::move(kill)),
      limiter_(options.output_cap_bytes, options.output_rate_bytes_per_s, options.clock),
      stdin_(std::move(stdin_write)),
      output_{std::move(stdout_read), std::move(stderr_read)} {
  SetNonBlocking(stdin_);
  SetNonBlocking(output_[0]);
  SetNonBlocking(output_[1]);
}

void ExecPump::Watch(Prepare prepare, Ready ready) {
  watchers_.push_back(Watcher{std::move(prepare), std::move(ready)});
}

void ExecPump::AppendStdin(std::string_view data) {
  if (!stdin_ || stdin_eof_) return;
  stdin_pending_.append(data);
  WriteStdin();
}

void ExecPump::CloseStdin() {
  stdin_eof_ = true;
  WriteStdin();
}

void ExecPump::WriteStdin() {
  while (stdin_ && stdin_off_ < stdin_pending_.size()) {
    ssize_t n = WriteNoSigpipe(stdin_.get(), stdin_pending_.data() + stdin_off_,
                               stdin_pending_.size() - stdin_off_);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      // EPIPE (the command closed its stdin) or worse: nobody reads the rest.
      stdin_.Reset();
      break;
    }
    stdin_off_ += static_cast<size_t>(n);
  }
  if (!stdin_ || stdin_off_ == stdin_pending_.size()) {
    stdin_pending_.clear();
    stdin_off_ = 0;
  } else if (stdin_off_ >= stdin_pending_.size() / 2) {
    // Written bytes leave the front in bulk, not one write at a time.
    stdin_pending_.erase(0, stdin_off_);
    stdin_off_ = 0;
  }
  if (stdin_eof_ && stdin_pending_.empty()) stdin_.Reset();
}

void ExecPump::MarkExited() {
  if (exited_) return;
  exited_ = true;
  exit_ns_ = clock_.NowNs();
  // Nobody will read what is left for the command.
  stdin_.Reset();
  WriteStdin();
}

bool ExecPump::Kill(ExecKill reason) {
  if (exited_ || killed()) return false;
  kill_reason_ = reason;
  kill_();
  // Counted from when the kill is done: it may wait for processes to go.
  kill_ns_ = clock_.NowNs();
  return true;
}

int64_t ExecPump::DrainEnd() const {
  int64_t end = SaturatingAdd(exit_ns_, options_.drain_after_exit_ns);
  if (killed()) end = std::min(end, SaturatingAdd(kill_ns_, options_.drain_after_kill_ns));
  return end;
}

int64_t ExecPump::NextWake() const {
  if (exited_) return DrainEnd();
  if (killed()) return SaturatingAdd(kill_ns_, options_.exit_grace_ns);
  return options_.deadline_ns;
}

absl::Status ExecPump::ReadOutput(int stream) {
  const int i = stream == 2;
  ScopedFd& fd = output_[i];
  char buf[kReadBytes];
  for (int reads = 0; reads < kMaxReadsPerRound && fd && sink_.HasRoom(); ++reads) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {  // EOF, or an error: treated as closed
      fd.Reset();
      break;
    }
    chunk_.clear();
    const uint64_t dropped_before = limiter_.dropped_bytes();
    limiter_.Admit(std::string_view(buf, static_cast<size_t>(n)), &chunk_);
    dropped_[i] += limiter_.dropped_bytes() - dropped_before;
    if (!chunk_.empty()) {
      kept_[i] += chunk_.size();
      DSEC_RETURN_IF_ERROR(sink_.Write(stream, chunk_));
    }
    const bool over = (options_.kill_after_dropped_bytes != 0 &&
                       limiter_.dropped_bytes() >= options_.kill_after_dropped_bytes) ||
                      (options_.kill_at_cap && limiter_.dropped_by_cap() > 0);
    if (over) Kill(ExecKill::kOutput);
    // A short read emptied the pipe: poll tells when there is more.
    if (static_cast<size_t>(n) < sizeof(buf)) break;
  }
  return absl::OkStatus();
}

absl::Status ExecPump::Run() {
  absl::Status s = Loop();
  // Nobody will wait for the command any more: it must not outlive the exec.
  if (!s.ok()) Kill(ExecKill::kCaller);
  return s;
}

absl::Status ExecPump::Loop() {
  std::vector<pollfd> fds;
  std::vector<int> slots(watchers_.size());
  std::vector<int64_t> wakes(watchers_.size());
  fds.reserve(4 + watchers_.size());
  for (;;) {
    int64_t now = clock_.NowNs();
    const bool pipes_open = output_[0] || output_[1];
    if ((exited_ || exit_unknown_) && !pipes_open) return absl::OkStatus();
    if (exited_ && now >= DrainEnd()) return absl::OkStatus();  // strays hold the pipes
    if (!exited_ && killed() && now - kill_ns_ >= options_.exit_grace_ns) {
      return absl::InternalError(absl::StrCat("the command had not exited ",
                                              options_.exit_grace_ns / 1'000'000,
                                              " ms after it was killed"));
    }
    if (!exited_ && !killed() && now >= options_.deadline_ns) {
      Kill(ExecKill::kTimeout);
      continue;
    }

    fds.clear();
    auto add = [&fds](int fd, short events) -> int {
      if (fd < 0 || events == 0) return -1;
      fds.push_back(pollfd{fd, events, 0});
      return static_cast<int>(fds.size()) - 1;
    };
    const bool room = sink_.HasRoom();
    const int out_slot = room ? add(output_[0].get(), POLLIN) : -1;
    const int err_slot = room ? add(output_[1].get(), POLLIN) : -1;
    const int in_slot = stdin_pending_.empty() ? -1 : add(stdin_.get(), POLLOUT);
    const int stop_slot = add(options_.stop_fd, POLLIN);
    int64_t wake = NextWake();
    for (size_t w = 0; w < watchers_.size(); ++w) {
      Interest interest = watchers_[w].prepare(now);
      slots[w] = add(interest.fd, interest.events);
      wakes[w] = interest.wake_ns;
      wake = std::min(wake, interest.wake_ns);
    }
    int timeout_ms = -1;
    if (wake != kExecNoDeadline) {
      // Rounded up, so that the loop never wakes just before a deadline and
      // spins; at most an hour (the poll(2) argument is an int).
      const int64_t left = std::max<int64_t>(wake - now, 0);
      const int64_t ms = left / 1'000'000 + (left % 1'000'000 != 0);
      timeout_ms = static_cast<int>(std::min<int64_t>(ms, 3'600'000));
    }
    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("poll");
    }
    if (stop_slot >= 0 && fds[stop_slot].revents != 0) {
      return absl::CancelledError("stop requested");
    }
    now = clock_.NowNs();
    for (size_t w = 0; w < watchers_.size(); ++w) {
      const short revents = slots[w] >= 0 ? fds[slots[w]].revents : 0;
      if (revents != 0 || wakes[w] <= now) DSEC_RETURN_IF_ERROR(watchers_[w].ready(revents, now));
    }
    if (in_slot >= 0 && fds[in_slot].revents != 0) WriteStdin();
    if (out_slot >= 0 && fds[out_slot].revents != 0) DSEC_RETURN_IF_ERROR(ReadOutput(1));
    if (err_slot >= 0 && fds[err_slot].revents != 0) DSEC_RETURN_IF_ERROR(ReadOutput(2));
  }
}

}  // namespace dsec
