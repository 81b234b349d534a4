// SPDX-License-Identifier: Apache-2.0
// ExecControl against a real command (cat, sleep) run through an ExecPump:
// stdin streamed from another thread, the end of stdin, signals to the
// command alone, and every call refused once it ended.
#include "base/exec_control.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace dsec {
namespace {

struct Child {
  pid_t pid = -1;
  ScopedFd pidfd;
  ScopedFd in, out, err;
};

Child Start(const char* path, const char* arg) {
  Child c;
  auto in = Pipe::Create();
  auto out = Pipe::Create();
  auto err = Pipe::Create();
  EXPECT_TRUE(in.ok() && out.ok() && err.ok());
  c.pid = ::fork();
  if (c.pid == 0) {
    ::dup2(in->read.get(), 0);
    ::dup2(out->write.get(), 1);
    ::dup2(err->write.get(), 2);
    ::execl(path, path, arg, static_cast<char*>(nullptr));
    ::_exit(127);
  }
  c.pidfd.Reset(static_cast<int>(::syscall(SYS_pidfd_open, c.pid, 0)));
  c.in = std::move(in->write);
  c.out = std::move(out->read);
  c.err = std::move(err->read);
  return c;
}

struct Outcome {
  std::string out;
  int status = 0;
  ExecKill kill = ExecKill::kNone;
};

// Runs the pump for `c` with `control`; a signal other than SIGKILL goes
// to the child with kill(2).
Outcome RunPump(Child& c, const std::shared_ptr<ExecControl>& control) {
  Outcome o;
  std::string err;
  StringOutputSink sink(&o.out, &err);
  ExecPumpOptions options;
  options.deadline_ns = MonotonicClock::Get().NowNs() + 20'000'000'000LL;
  options.exit_grace_ns = 5'000'000'000LL;
  const pid_t pid = c.pid;
  ExecPump pump(options, std::move(c.in), std::move(c.out), std::move(c.err), &sink,
                [pid] { ::kill(pid, SIGKILL); });
  WatchExecControl(pump, control, [pid](int sig) { ::kill(pid, sig); });
  pump.Watch([&](int64_t) { return ExecPump::Interest{pump.exited() ? -1 : c.pidfd.get(), POLLIN}; },
             [&](short, int64_t) {
               ::waitpid(pid, &o.status, 0);
               pump.MarkExited();
               return absl::OkStatus();
             });
  EXPECT_TRUE(control == nullptr || control->running());
  absl::Status s = pump.Run();
  EXPECT_TRUE(s.ok()) << s;
  if (control) control->MarkEnded();
  o.kill = pump.kill_reason();
  return o;
}

TEST(ExecControlTest, StdinStreamsFromAnotherThreadUntilItIsClosed) {
  auto control = ExecControl::Create(/*stdin_open=*/true);
  ASSERT_TRUE(control.ok()) << control.status();
  std::shared_ptr<ExecControl> c = *control;
  Child child = Start("/bin/cat", nullptr);
  std::thread writer([c] {
    while (!c->running()) std::this_thread::yield();
    for (int i = 0; i < 100; ++i) {
      std::string piece = "line " + std::to_string(i) + "\n";
      absl::Status s;
      while (absl::IsResourceExhausted(s = c->WriteStdin(piece))) std::this_thread::yield();
      ASSERT_TRUE(s.ok()) << s;
    }
    ASSERT_TRUE(c->CloseStdin().ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(c->WriteStdin("late")));
  });
  Outcome o = RunPump(child, c);
  writer.join();
  std::string want;
  for (int i = 0; i < 100; ++i) want += "line " + std::to_string(i) + "\n";
  EXPECT_EQ(o.out, want);
  ASSERT_TRUE(WIFEXITED(o.status));
  EXPECT_EQ(WEXITSTATUS(o.status), 0);
  // Ended: every call is refused.
  EXPECT_TRUE(absl::IsFailedPrecondition(c->WriteStdin("x")));
  EXPECT_TRUE(absl::IsFailedPrecondition(c->CloseStdin()));
  EXPECT_TRUE(absl::IsFailedPrecondition(c->Signal(SIGTERM)));
  EXPECT_FALSE(c->running());
}

TEST(ExecControlTest, PendingStdinIsBoundedUntilTheLoopTakesIt) {
  auto c = ExecControl::Create(true, /*max_pending_stdin=*/8);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)->WriteStdin("12345678").ok());
  EXPECT_TRUE(absl::IsResourceExhausted((*c)->WriteStdin("9")));
  ExecControl::Taken t = (*c)->Take(5);
  EXPECT_EQ(t.stdin_bytes, "12345");
  EXPECT_TRUE((*c)->stdin_backlog());
  EXPECT_TRUE((*c)->WriteStdin("9ab").ok());
  ASSERT_TRUE((*c)->CloseStdin().ok());
  t = (*c)->Take(100);
  EXPECT_EQ(t.stdin_bytes, "6789ab");
  EXPECT_TRUE(t.close_stdin);
  EXPECT_FALSE((*c)->stdin_backlog());
  EXPECT_FALSE((*c)->Take(100).close_stdin);  // once
}

TEST(ExecControlTest, AClosedStdinRefusesWritesFromTheStart) {
  auto c = ExecControl::Create(/*stdin_open=*/false);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition((*c)->WriteStdin("x")));
  EXPECT_TRUE(absl::IsInvalidArgument((*c)->Signal(0)));
  EXPECT_TRUE(absl::IsInvalidArgument((*c)->Signal(NSIG)));
}

TEST(ExecControlTest, SigtermGoesThroughTheCallerAndSigkillIsTheCallersKill) {
  for (int sig : {SIGTERM, SIGKILL}) {
    auto control = ExecControl::Create(false);
    ASSERT_TRUE(control.ok());
    std::shared_ptr<ExecControl> c = *control;
    Child child = Start("/bin/sleep", "30");
    std::thread sender([c, sig] {
      while (!c->running()) std::this_thread::yield();
      EXPECT_TRUE(c->Signal(sig).ok());
    });
    Outcome o = RunPump(child, c);
    sender.join();
    ASSERT_TRUE(WIFSIGNALED(o.status)) << sig;
    EXPECT_EQ(WTERMSIG(o.status), sig);
    EXPECT_EQ(o.kill, sig == SIGKILL ? ExecKill::kCaller : ExecKill::kNone);
  }
}

}  // namespace
}  // namespace dsec
