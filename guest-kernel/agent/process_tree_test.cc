// SPDX-License-Identifier: Apache-2.0
// Process-tree selection (pure), and the PID-1 reaper driving a real server
// in a child process that acts as a subreaper.
#include "guest-kernel/agent/process_tree.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "gtest/gtest.h"
#include "guest-kernel/agent/reaper.h"
#include "guest-kernel/agent/test_server.h"

namespace dsec::agent {
namespace {

using testing::SocketPair;
using testing::TempDir;

TEST(ProcStatTest, ParsesCommandNamesWithSpacesAndParens) {
  auto e = ParseProcStat("4242 (my (evil) cmd) ) S 17 4242 4000 0 -1 4194560 97 0 0 0\n");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->pid, 4242);
  EXPECT_EQ(e->ppid, 17);
  EXPECT_EQ(e->pgrp, 4242);
  EXPECT_EQ(e->session, 4000);
  EXPECT_FALSE(ParseProcStat("garbage").ok());
  EXPECT_FALSE(ParseProcStat("12 (x) S 1").ok());
}

TEST(ProcStatTest, ReadsOurOwnEntry) {
  bool found = false;
  for (const ProcEntry& e : ReadProcTable()) {
    if (e.pid == getpid()) {
      found = true;
      EXPECT_EQ(e.ppid, getppid());
      EXPECT_EQ(e.pgrp, getpgrp());
    }
  }
  EXPECT_TRUE(found);
}

TEST(SelectExecTreeTest, TakesGroupSessionAndDescendants) {
  const pid_t self = 50;
  std::vector<ProcEntry> t = {
      {1, 0, 1, 1},          // init
      {50, 1, 50, 50},       // the agent
      {100, 50, 100, 100},   // exec leader (setsid)
      {101, 100, 100, 100},  // its child
      {102, 100, 102, 102},  // setsid child: own group and session
      {103, 102, 103, 103},  // grandchild of it, setsid again
      {104, 1, 104, 100},    // orphan that kept the session
      {105, 1, 105, 105},    // unrelated
      {106, 50, 50, 50},     // another child of the agent
  };
  EXPECT_EQ(SelectExecTree(t, 100, true, self), (std::vector<pid_t>{100, 101, 102, 103, 104}));
  // Once the leader is reaped (gone from the table, its children
  // re-parented) its pid may be reused: no descendant walk.
  std::vector<ProcEntry> reaped = {
      {1, 0, 1, 1},         {50, 1, 50, 50},    {101, 1, 100, 100}, {102, 1, 102, 102},
      {103, 102, 103, 103}, {104, 1, 104, 100}, {105, 1, 105, 105},
  };
  EXPECT_EQ(SelectExecTree(reaped, 100, false, self), (std::vector<pid_t>{101, 104}));
  // Never the agent itself or init.
  EXPECT_EQ(SelectExecTree(t, 50, true, self), (std::vector<pid_t>{100, 101, 102, 103, 106}));
}

// The child process: subreaper + Reaper + Server on `fd`; when the
// connection ends, reaps once more and writes the orphan count to `report`.
[[noreturn]] void ReaperChildMain(int fd, int report, const std::string& root) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, nullptr);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  auto reaper = Reaper::Create();
  if (!reaper.ok()) _exit(10);
  auto stop = EventFd::Create(EFD_NONBLOCK);
  if (!stop.ok()) _exit(11);
  std::thread reaper_thread([&] { (*reaper)->Run(stop->fd()); });
  ServerOptions o;
  o.root = root;
  o.launcher = reaper->get();
  auto server = Server::Create(o);
  if (!server.ok()) _exit(12);
  (*server)->ServeConnection(ScopedFd(fd));
  if (!(*server)->WaitIdle(120'000)) _exit(13);
  server->reset();
  (void)stop->Signal();
  reaper_thread.join();
  (*reaper)->Run(stop->fd());  // one last pass (stop is set: returns after it)
  uint64_t orphans = (*reaper)->orphans_reaped();
  ssize_t n = write(report, &orphans, sizeof(orphans));
  _exit(n == sizeof(orphans) ? 0 : 14);
}

// A forked ReaperChildMain serving `conn`'s other end in `dir`; `report`
// gets its orphan count once the connection closes.
struct ReaperChild {
  ScopedFd conn;
  ScopedFd report;
  pid_t pid = -1;
};
ReaperChild StartReaperChild(const TempDir& dir) {
  auto [ours, theirs] = SocketPair();
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return {};
  ScopedFd report_read(report[0]);
  ScopedFd report_write(report[1]);
  pid_t child = fork();
  if (child == 0) {
    ours.Reset();  // else the connection never sees our end close
    report_read.Reset();
    ReaperChildMain(theirs.Release(), report_write.get(), dir.path());
  }
  return {std::move(ours), std::move(report_read), child};
}

TEST(ReaperTest, ExitStatusesSurviveTheReaperAndOrphansAreReaped) {
  TempDir dir;
  ReaperChild rc = StartReaperChild(dir);
  ASSERT_GE(rc.pid, 0);
  ScopedFd ours = std::move(rc.conn);
  ScopedFd report_read = std::move(rc.report);
  const pid_t child = rc.pid;

  {
    auto client = Client::Connect(std::move(ours));
    ASSERT_TRUE(client.ok()) << client.status();
    // Many short commands: each exit status must reach its exec even though
    // the reaper thread wait()s for every child.
    for (int i = 0; i < 30; ++i) {
      ExecRequest r;
      r.argv = {"sh", "-c", "exit " + std::to_string(i)};
      auto done = (*client)->Exec(r, nullptr);
      ASSERT_TRUE(done.ok()) << done.status();
      EXPECT_EQ(done->exit_code, i);
    }
    // An orphan: its parent exits first, so the subreaper inherits it.
    ExecRequest r;
    r.argv = {"sh", "-c", "sleep 0.2 > /dev/null 2>&1 & echo $!"};
    std::string out;
    auto done = (*client)->Exec(r, [&](int, std::string_view d) { out.append(d); });
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(done->exit_code, 0);
    int orphan = 0;
    ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(out), &orphan)) << out;
    long pidfd = syscall(SYS_pidfd_open, orphan, 0);
    if (pidfd >= 0) {
      ScopedFd fd(static_cast<int>(pidfd));
      pollfd p = {fd.get(), POLLIN, 0};
      ASSERT_EQ(poll(&p, 1, 20'000), 1);
    }
  }  // closing the connection lets the child report

  uint64_t orphans = 0;
  ASSERT_EQ(read(report_read.get(), &orphans, sizeof(orphans)),
            static_cast<ssize_t>(sizeof(orphans)));
  EXPECT_GE(orphans, 1u);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace dsec::agent

namespace dsec::agent {
namespace {

// As a guest's PID 1 (here a subreaper): a double-forked setsid grandchild
// is re-parented to the agent and found only because it holds the output
// pipe. The timeout must kill it, although its parent is now the agent (the
// agent's own children between fork and exec are the ones it spares).
TEST(ReaperTest, ATimeoutKillsAnOrphanReparentedToTheAgent) {
  TempDir dir;
  ReaperChild rc = StartReaperChild(dir);
  ASSERT_GE(rc.pid, 0);
  ScopedFd ours = std::move(rc.conn);
  ScopedFd report_read = std::move(rc.report);
  const pid_t child = rc.pid;
  int orphan = 0;
  {
    auto client = Client::Connect(std::move(ours));
    ASSERT_TRUE(client.ok()) << client.status();
    ExecRequest r;
    r.argv = {"sh", "-c", "(setsid sh -c 'echo $$; exec sleep 1000' &); sleep 1000"};
    r.timeout_ms = 1'500;
    std::string out;
    auto done = (*client)->Exec(r, [&](int, std::string_view d) { out.append(d); });
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_TRUE(done->timed_out);
    ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(out), &orphan)) << out;
    long pidfd = syscall(SYS_pidfd_open, orphan, 0);
    if (pidfd >= 0) {
      ScopedFd fd(static_cast<int>(pidfd));
      pollfd p = {fd.get(), POLLIN, 0};
      EXPECT_EQ(poll(&p, 1, 10'000), 1) << "pid " << orphan << " survived the timeout";
    }
  }
  if (orphan > 0) kill(orphan, SIGKILL);  // whatever the outcome
  uint64_t orphans = 0;
  ASSERT_EQ(read(report_read.get(), &orphans, sizeof(orphans)), static_cast<ssize_t>(sizeof(orphans)));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace dsec::agent
