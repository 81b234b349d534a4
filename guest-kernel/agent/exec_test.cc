// SPDX-License-Identifier: Apache-2.0
// EXEC against a real server on a socketpair, with real processes.
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "guest-kernel/agent/test_server.h"

namespace dsec::agent {
namespace {

using testing::TempDir;
using testing::TestServer;

struct Captured {
  std::string out, err;
  OutputCallback Callback() {
    return [this](int stream, std::string_view data) {
      (stream == 1 ? out : err).append(data.data(), data.size());
    };
  }
};

ExecRequest Sh(const std::string& script) {
  ExecRequest r;
  r.argv = {"sh", "-c", script};
  return r;
}

// Waits until `pid` has exited (or no longer exists), up to timeout_ms.
bool WaitGone(pid_t pid, int64_t timeout_ms) {
  long fd = syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) return errno == ESRCH;
  ScopedFd pidfd(static_cast<int>(fd));
  pollfd p = {pidfd.get(), POLLIN, 0};
  return poll(&p, 1, static_cast<int>(timeout_ms)) == 1;
}

std::vector<pid_t> Pids(const std::string& text) {
  std::vector<pid_t> pids;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    int pid;
    if (absl::SimpleAtoi(line, &pid)) pids.push_back(pid);
  }
  return pids;
}

class ExecTest : public ::testing::Test {
 protected:
  ServerOptions Options() {
    ServerOptions o;
    o.root = dir_.path();
    return o;
  }
  TempDir dir_;
};

TEST_F(ExecTest, EchoGoesToStdout) {
  TestServer ts(Options());
  auto client = ts.Connect();
  Captured c;
  ExecRequest r;
  r.argv = {"echo", "hello", "world"};
  auto done = client->Exec(r, c.Callback());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code, 0);
  EXPECT_FALSE(done->signal.has_value());
  EXPECT_EQ(c.out, "hello world\n");
  EXPECT_EQ(c.err, "");
  EXPECT_EQ(done->stdout_bytes, 12u);
  EXPECT_EQ(done->killed_by, "");
  EXPECT_FALSE(done->timed_out);
  EXPECT_GT(done->peak_rss_kib, 0);
}

TEST_F(ExecTest, SeparatesStderrAndReportsTheExitCode) {
  TestServer ts(Options());
  auto client = ts.Connect();
  Captured c;
  auto done = client->Exec(Sh("echo out; echo err >&2; exit 3"), c.Callback());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code, 3);
  EXPECT_EQ(c.out, "out\n");
  EXPECT_EQ(c.err, "err\n");
  EXPECT_EQ(done->stderr_bytes, 4u);
}

TEST_F(ExecTest, ReportsTheKillingSignal) {
  TestServer ts(Options());
  auto client = ts.Connect();
  auto done = client->Exec(Sh("kill -TERM $$"), nullptr);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_FALSE(done->exit_code.has_value());
  EXPECT_EQ(done->signal, SIGTERM);
}

TEST_F(ExecTest, UsesEnvAndCwdAndStartsInTheRoot) {
  ASSERT_EQ(mkdir(dir_.Sub("sub").c_str(), 0755), 0);
  TestServer ts(Options());
  auto client = ts.Connect();
  Captured c;
  ExecRequest r = Sh("echo \"$FOO\"; pwd; echo \"$HOME\"");
  r.env = {{"FOO", "bar baz"}, {"HOME", "/nowhere"}};
  r.cwd = dir_.Sub("sub");
  auto done = client->Exec(r, c.Callback());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(c.out, "bar baz\n" + dir_.Sub("sub") + "\n/nowhere\n");
  Captured d;
  ASSERT_TRUE(client->Exec(Sh("pwd"), d.Callback()).ok());
  EXPECT_EQ(d.out, dir_.path() + "\n");
}

TEST_F(ExecTest, MissingProgramIsAnErrorAndTheConnectionStaysUsable) {
  TestServer ts(Options());
  auto client = ts.Connect();
  ExecRequest r;
  r.argv = {"/nonexistent/dsec-no-such-program"};
  auto done = client->Exec(r, nullptr);
  EXPECT_TRUE(absl::IsNotFound(done.status())) << done.status();
  r.argv = {"dsec-no-such-program-in-path"};
  EXPECT_TRUE(absl::IsNotFound(client->Exec(r, nullptr).status()));
  r.argv = {};
  EXPECT_TRUE(absl::IsInvalidArgument(client->Exec(r, nullptr).status()));
  ExecRequest bad_cwd = Sh("true");
  bad_cwd.cwd = "/nonexistent-dir";
  EXPECT_TRUE(absl::IsNotFound(client->Exec(bad_cwd, nullptr).status()));
  EXPECT_FALSE(client->broken());
  Captured c;
  ASSERT_TRUE(client->Exec(Sh("echo still"), c.Callback()).ok());
  EXPECT_EQ(c.out, "still\n");
}

TEST_F(ExecTest, StreamsStdinInteractively) {
  TestServer ts(Options());
  auto client = ts.Connect();
  ExecRequest r;
  r.argv = {"cat"};
  r.stdin = true;
  auto stream = client->StartExec(r);
  ASSERT_TRUE(stream.ok()) << stream.status();
  for (std::string line : {"one\n", "two\n"}) {
    ASSERT_TRUE((*stream)->WriteStdin(line).ok());
    // cat echoes each line before stdin is closed: real streaming.
    auto ev = (*stream)->Next(20'000);
    ASSERT_TRUE(ev.ok()) << ev.status();
    ASSERT_EQ(ev->kind, ExecEvent::Kind::kOutput);
    EXPECT_EQ(ev->data, line);
  }
  ASSERT_TRUE((*stream)->CloseStdin().ok());
  auto done = (*stream)->Wait(nullptr);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code, 0);
}

// SIGNAL reaches the running command's process group: a trap answers
// SIGTERM; SIGKILL ends the command as a kill, not as a timeout.
TEST_F(ExecTest, SignalsReachTheRunningCommand) {
  TestServer ts(Options());
  auto client = ts.Connect();
  auto stream = client->StartExec(Sh("trap 'echo term; exit 3' TERM; echo ready; while :; do sleep 0.05; done"));
  ASSERT_TRUE(stream.ok()) << stream.status();
  auto ev = (*stream)->Next(20'000);
  ASSERT_TRUE(ev.ok()) << ev.status();
  ASSERT_EQ(ev->data, "ready\n");
  ASSERT_TRUE((*stream)->Signal(SIGTERM).ok());
  Captured c;
  auto done = (*stream)->Wait(c.Callback());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(c.out, "term\n");
  EXPECT_EQ(done->exit_code, 3);
  EXPECT_TRUE((*stream)->Signal(SIGTERM).ok());  // ended: nothing is sent

  stream = client->StartExec(Sh("echo ready; sleep 30"));
  ASSERT_TRUE(stream.ok()) << stream.status();
  ev = (*stream)->Next(20'000);
  ASSERT_TRUE(ev.ok()) << ev.status();
  ASSERT_TRUE((*stream)->Signal(SIGKILL).ok());
  done = (*stream)->Wait(nullptr);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->signal, SIGKILL);
  EXPECT_FALSE(done->timed_out);
}

TEST_F(ExecTest, LargeStdinAndOutputDoNotDeadlock) {
  TestServer ts(Options());
  auto client = ts.Connect();
  ExecRequest r;
  r.argv = {"cat"};
  r.stdin = true;
  r.output_cap_bytes = 0;
  r.kill_after_dropped_bytes = 0;
  std::string data;
  for (int i = 0; data.size() < (8u << 20); ++i) data += std::to_string(i) + "\n";
  Captured c;
  auto done = client->Exec(r, c.Callback(), data);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code, 0);
  EXPECT_EQ(c.out.size(), data.size());
  EXPECT_TRUE(c.out == data);
}

TEST_F(ExecTest, OutputArrivesBeforeTheCommandEnds) {
  TestServer ts(Options());
  auto client = ts.Connect();
  // The command cannot end before the test writes its stdin, which it does
  // only once the first line has arrived: an order, not a time.
  ExecRequest r = Sh("echo first; read go; echo second");
  r.stdin = true;
  auto stream = client->StartExec(r);
  ASSERT_TRUE(stream.ok()) << stream.status();
  const int64_t start = MonotonicNowNs();
  auto ev = (*stream)->Next(30'000);
  ASSERT_TRUE(ev.ok()) << ev.status();
  ASSERT_EQ(ev->kind, ExecEvent::Kind::kOutput);
  EXPECT_EQ(ev->data, "first\n");
  const int64_t held_ms = (MonotonicNowNs() - start) / 1'000'000;
  ASSERT_TRUE((*stream)->WriteStdin("go\n").ok());
  ASSERT_TRUE((*stream)->CloseStdin().ok());
  Captured rest;
  auto done = (*stream)->Wait(rest.Callback());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(rest.out, "second\n");
  EXPECT_EQ(done->exit_code, 0);
  // The command's duration covers at least the time the test held it.
  EXPECT_GE(done->duration_ms, held_ms);
}

TEST_F(ExecTest, TheClientsBoundOnAnExecCountsOnItsExecClock) {
  TestServer ts(Options());
  // The bound's clock stands still (a paused sandbox's): a command that
  // outlasts the bound in real time is still waited for.
  FakeClock clock(1'000'000'000);
  ClientOptions o;
  o.untimed_exec_wait_ms = 150;
  o.exec_clock = &clock;
  auto client = ts.Connect(o);
  ExecRequest r = Sh("read go; echo done");
  r.stdin = true;
  auto stream = client->StartExec(r);
  ASSERT_TRUE(stream.ok()) << stream.status();
  auto nothing = (*stream)->Next(400);
  EXPECT_TRUE(absl::IsDeadlineExceeded(nothing.status())) << nothing.status();
  ASSERT_TRUE((*stream)->WriteStdin("go\n").ok());
  ASSERT_TRUE((*stream)->CloseStdin().ok());
  Captured c;
  auto done = (*stream)->Wait(c.Callback());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(c.out, "done\n");
  EXPECT_FALSE(client->broken());
  // Once that clock passes the bound, the wait ends and the client with it
  // (the stream is out of step), even inside a longer wait of the caller.
  auto second = client->StartExec(r);
  ASSERT_TRUE(second.ok()) << second.status();
  std::thread advance([&] {
    ::usleep(200'000);
    clock.AdvanceNs(1'000'000'000);
  });
  const int64_t start = MonotonicNowNs();
  auto ended = (*second)->Next(20'000);
  advance.join();
  EXPECT_TRUE(absl::IsDeadlineExceeded(ended.status())) << ended.status();
  EXPECT_LT(MonotonicNowNs() - start, 10'000'000'000);
  EXPECT_TRUE(client->broken());
}

TEST_F(ExecTest, YesFloodIsCappedCountedAndKilled) {
  TestServer ts(Options());
  auto client = ts.Connect();
  ExecRequest r;
  r.argv = {"yes"};
  r.output_cap_bytes = 64 << 10;
  r.kill_after_dropped_bytes = 8 << 20;
  r.timeout_ms = 120'000;
  Captured c;
  auto done = client->Exec(r, c.Callback());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->killed_by, "output");
  EXPECT_FALSE(done->timed_out);
  EXPECT_EQ(done->signal, SIGKILL);
  EXPECT_EQ(c.out.size(), 64u << 10);
  EXPECT_EQ(done->stdout_bytes, 64u << 10);
  EXPECT_GE(done->stdout_dropped, 8u << 20);
  EXPECT_EQ(done->stderr_dropped, 0u);
  EXPECT_GE(ts.server().metrics().execs_killed_by_output.load(), 1u);
}

TEST_F(ExecTest, RateLimitDropsTheExcess) {
  TestServer ts(Options());
  auto client = ts.Connect();
  ExecRequest r = Sh("head -c 4000000 /dev/zero");
  r.output_cap_bytes = 0;
  r.output_rate_bytes_per_s = 100'000;
  r.kill_after_dropped_bytes = 0;
  Captured c;
  auto done = client->Exec(r, c.Callback());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code, 0);
  EXPECT_EQ(done->stdout_bytes + done->stdout_dropped, 4'000'000u);
  EXPECT_GT(done->stdout_dropped, 0u);
  EXPECT_EQ(c.out.size(), done->stdout_bytes);
}

TEST_F(ExecTest, TimeoutKillsTheGroupSetsidChildrenAndPipeHolders) {
  TestServer ts(Options());
  auto client = ts.Connect();
  // A background child (same group), a setsid child (own session, still a
  // descendant) and a double-forked setsid grandchild (orphaned, found only
  // because it holds the output pipe). Each prints its pid.
  ExecRequest r =
      Sh("sleep 1000 & echo $!; "
         "setsid sh -c 'echo $$; exec sleep 1000' & "
         "(setsid sh -c 'echo $$; exec sleep 1000' &); "
         "sleep 1000");
  r.timeout_ms = 2'000;
  Captured c;
  const int64_t start = MonotonicNowNs();
  auto done = client->Exec(r, c.Callback());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(done->timed_out);
  EXPECT_EQ(done->killed_by, "timeout");
  EXPECT_EQ(done->signal, SIGKILL);
  EXPECT_LT(MonotonicNowNs() - start, 30'000'000'000);
  std::vector<pid_t> pids = Pids(c.out);
  ASSERT_EQ(pids.size(), 3u) << c.out;
  for (pid_t pid : pids) EXPECT_TRUE(WaitGone(pid, 10'000)) << "pid " << pid << " survived";
}

TEST_F(ExecTest, BackgroundChildDoesNotHoldTheExecOpen) {
  ServerOptions o = Options();
  o.post_exit_drain_ms = 300;
  TestServer ts(o);
  auto client = ts.Connect();
  Captured c;
  auto done = client->Exec(Sh("sleep 1000 & echo $!"), c.Callback());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code, 0);
  std::vector<pid_t> pids = Pids(c.out);
  ASSERT_EQ(pids.size(), 1u);
  // Not killed on a normal exit (background services are allowed); clean up.
  EXPECT_EQ(kill(pids[0], 0), 0);
  kill(pids[0], SIGKILL);
  EXPECT_TRUE(WaitGone(pids[0], 10'000));
}

TEST_F(ExecTest, ConcurrentExecsOnTwoConnections) {
  TestServer ts(Options());
  auto a = ts.Connect();
  auto b = ts.Connect();
  ExecRequest cat;
  cat.argv = {"cat"};
  cat.stdin = true;
  auto running = a->StartExec(cat);
  ASSERT_TRUE(running.ok()) << running.status();
  // While `cat` on connection a waits for stdin, connection b runs commands.
  std::thread other([&] {
    for (int i = 0; i < 3; ++i) {
      Captured c;
      auto done = b->Exec(Sh("echo b" + std::to_string(i)), c.Callback());
      ASSERT_TRUE(done.ok()) << done.status();
      EXPECT_EQ(c.out, "b" + std::to_string(i) + "\n");
    }
  });
  other.join();
  ASSERT_TRUE((*running)->WriteStdin("a done\n").ok());
  ASSERT_TRUE((*running)->CloseStdin().ok());
  Captured c;
  auto done = (*running)->Wait(c.Callback());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(c.out, "a done\n");
}

TEST_F(ExecTest, ConcurrentExecLimitRefusesTheExtraCommand) {
  ServerOptions o = Options();
  o.max_concurrent_execs = 1;
  TestServer ts(o);
  auto a = ts.Connect();
  auto b = ts.Connect();
  ExecRequest cat;
  cat.argv = {"cat"};
  cat.stdin = true;
  auto running = a->StartExec(cat);
  ASSERT_TRUE(running.ok());
  auto refused = b->Exec(Sh("true"), nullptr);
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  ASSERT_TRUE((*running)->CloseStdin().ok());
  ASSERT_TRUE((*running)->Wait(nullptr).ok());
  auto again = b->Exec(Sh("true"), nullptr);
  EXPECT_TRUE(again.ok()) << again.status();
}

}  // namespace
}  // namespace dsec::agent
