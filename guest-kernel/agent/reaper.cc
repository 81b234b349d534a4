// SPDX-License-Identifier: Apache-2.0
#include "guest-kernel/agent/reaper.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/eventfd.h"
#include "base/status.h"

namespace dsec::agent {

struct Reaper::Entry {
  explicit Entry(EventFd fd) : done(std::move(fd)) {}
  EventFd done;                       // signalled once `status` is set
  std::optional<ChildStatus> status;  // guarded by Reaper::mu_
};

class ReaperChild : public Child {
 public:
  ReaperChild(Reaper* reaper, pid_t pid, std::shared_ptr<Reaper::Entry> entry)
      : reaper_(reaper), pid_(pid), entry_(std::move(entry)) {}
  ~ReaperChild() override {
    if (collected_) return;
    absl::MutexLock lock(&reaper_->mu_);
    // Still unreaped: kill it; the reaper then reaps it as an orphan.
    if (!entry_->status.has_value()) kill(pid_, SIGKILL);
    reaper_->registered_.erase(pid_);
  }

  pid_t pid() const override { return pid_; }
  int wait_fd() const override { return entry_->done.fd(); }
  bool Unreaped() const override {
    absl::MutexLock lock(&reaper_->mu_);
    return !entry_->status.has_value();
  }

  absl::StatusOr<std::optional<ChildStatus>> TryCollect() override {
    if (collected_) return absl::FailedPreconditionError("child already collected");
    absl::MutexLock lock(&reaper_->mu_);
    if (!entry_->status.has_value()) return std::nullopt;
    collected_ = true;
    reaper_->registered_.erase(pid_);
    return *entry_->status;
  }

 private:
  Reaper* const reaper_;
  const pid_t pid_;
  std::shared_ptr<Reaper::Entry> entry_;
  bool collected_ = false;
};

absl::StatusOr<std::unique_ptr<Reaper>> Reaper::Create() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  // The calling thread at least; main() must have done this before threads.
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  int fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) return ErrnoStatus("signalfd");
  return std::unique_ptr<Reaper>(new Reaper(ScopedFd(fd)));
}

Reaper::~Reaper() = default;

uint64_t Reaper::orphans_reaped() const {
  absl::MutexLock lock(&mu_);
  return orphans_;
}

void Reaper::ReapAll() {
  for (;;) {
    int status = 0;
    rusage ru = {};
    pid_t pid = wait4(-1, &status, WNOHANG, &ru);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;  // 0: none exited; ECHILD: no children
    absl::MutexLock lock(&mu_);
    auto it = registered_.find(pid);
    if (it == registered_.end()) {
      ++orphans_;
      continue;
    }
    it->second->status = internal::StatusFromWait(status, ru.ru_maxrss);
    (void)it->second->done.Signal();
  }
}

void Reaper::Run(int stop_fd) {
  for (;;) {
    ReapAll();
    pollfd fds[2] = {{signal_fd_.get(), POLLIN, 0}, {stop_fd, POLLIN, 0}};
    // The timeout is a safety net only: a SIGCHLD that some thread had not
    // blocked would be discarded (its default action is to ignore), and the
    // next wake-up reaps what it missed.
    int n = poll(fds, stop_fd >= 0 ? 2 : 1, 1000);
    if (n < 0 && errno != EINTR) return;
    if (stop_fd >= 0 && (fds[1].revents & POLLIN) != 0) return;
    signalfd_siginfo info;
    while (read(signal_fd_.get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    }
  }
}

absl::StatusOr<std::unique_ptr<Child>> Reaper::Spawn(const SpawnSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("spawn: empty argv");
  internal::PreparedSpawn prepared(spec);
  DSEC_ASSIGN_OR_RETURN(EventFd done, EventFd::Create(EFD_NONBLOCK));
  auto entry = std::make_shared<Entry>(std::move(done));
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) != 0) return ErrnoToStatus("pipe2");
  ScopedFd err_read(errpipe[0]);
  ScopedFd err_write(errpipe[1]);
  pid_t pid;
  {
    absl::MutexLock lock(&mu_);
    pid = fork();
    if (pid == 0) prepared.ExecInChild(err_write.get());
    if (pid < 0) return ErrnoToStatus("fork");
    registered_[pid] = entry;
  }
  err_write.Reset();
  auto child = std::make_unique<ReaperChild>(this, pid, entry);
  int exec_err = internal::ReadExecError(err_read.get());
  if (exec_err != 0) return ErrnoToStatus(absl::StrCat("exec ", spec.argv[0]), exec_err);
  return child;
}

}  // namespace dsec::agent
