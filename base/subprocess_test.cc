// SPDX-License-Identifier: Apache-2.0
#include "base/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"
#include "base/clock.h"
#include "base/file_io.h"
#include "base/scoped_fd.h"

namespace dsec {
namespace {

SpawnOptions Sh(const std::string& script) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.out = Stdio::Capture();
  o.err = Stdio::Capture();
  return o;
}

TEST(SubprocessTest, CapturesBothStreamsAndTheExitCode) {
  auto r = RunSubprocess(Sh("echo out; echo err >&2; exit 3"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->signal, 0);
  EXPECT_FALSE(r->Succeeded());
  EXPECT_EQ(r->Describe(), "exited 3: err");
  EXPECT_GE(r->exit_ns, r->spawn_ns);
}

TEST(SubprocessTest, MergesStderrIntoStdout) {
  SpawnOptions o = Sh("echo a; echo b >&2; echo c");
  o.err = Stdio::SameAsStdout();
  auto r = RunSubprocess(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out, "a\nb\nc\n");
  EXPECT_EQ(r->err, "");
}

TEST(SubprocessTest, AStandardStreamGivenAsADescriptorIsCopiedBeforeItIsReplaced) {
  // stderr to this process's stdout (fd 1) while the child's stdout is a
  // pipe: must not follow the child's fd 1 into the pipe.
  int saved = ::dup(1);
  ASSERT_GE(saved, 0);
  ScopedFd saved_stdout(saved);
  char tmpl[] = "/tmp/dsec-subprocess-XXXXXX";
  ScopedFd file(::mkstemp(tmpl));
  ASSERT_TRUE(file.valid());
  ::fflush(stdout);  // nothing of the test log goes into the file
  ASSERT_EQ(::dup2(file.get(), 1), 1);  // our stdout is the file for a moment
  SpawnOptions o = Sh("echo out; echo err >&2");
  o.err = Stdio::Fd(1);
  auto r = RunSubprocess(o);
  ::fflush(stdout);
  ASSERT_EQ(::dup2(saved_stdout.get(), 1), 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(ReadSmallFile(tmpl).value_or(""), "err\n");
  ::unlink(tmpl);
}

TEST(SubprocessTest, KeepsTheTailOfALargeOutput) {
  SpawnOptions o = Sh("head -c 300000 /dev/zero | tr '\\0' x; echo END");
  o.capture_max_bytes = 1000;
  auto r = RunSubprocess(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->out.size(), 1000u);
  EXPECT_EQ(r->out.substr(996), "END\n");
}

TEST(SubprocessTest, InheritsTheEnvironmentWithOverridesOrReplacesIt) {
  ASSERT_EQ(::setenv("DSEC_SUBPROCESS_TEST_A", "parent", 1), 0);
  ASSERT_EQ(::setenv("DSEC_SUBPROCESS_TEST_B", "parent", 1), 0);
  SpawnOptions o = Sh("echo \"$DSEC_SUBPROCESS_TEST_A,$DSEC_SUBPROCESS_TEST_B,$EXTRA\"");
  o.env = {"DSEC_SUBPROCESS_TEST_B=child", "EXTRA=1"};
  auto r = RunSubprocess(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out, "parent,child,1\n");
  o.env = {"DSEC_SUBPROCESS_TEST_A"};  // removed
  r = RunSubprocess(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out, ",parent,\n");
  o.env = {"DSEC_SUBPROCESS_TEST_B=child"};
  // Alone: only `env` and PATH.
  o.inherit_env = false;
  o.argv = {"env"};  // found through the PATH the child is given
  r = RunSubprocess(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out.find("DSEC_SUBPROCESS_TEST_A"), std::string::npos) << r->out;
  EXPECT_NE(r->out.find("DSEC_SUBPROCESS_TEST_B=child\n"), std::string::npos) << r->out;
  EXPECT_NE(r->out.find("PATH="), std::string::npos) << r->out;
  ::unsetenv("DSEC_SUBPROCESS_TEST_A");
  ::unsetenv("DSEC_SUBPROCESS_TEST_B");
}

TEST(SubprocessTest, RunsInTheGivenDirectoryWithStdinOnDevNull) {
  SpawnOptions o = Sh("pwd; cat");
  o.cwd = "/proc";
  auto r = RunSubprocess(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out, "/proc\n");
  EXPECT_TRUE(r->Succeeded());
}

TEST(SubprocessTest, WritesToAFileOrAGivenDescriptor) {
  char dir[] = "/tmp/dsec-subprocess-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/out";
  SpawnOptions o = Sh("echo to-file; echo to-fd >&2");
  o.out = Stdio::File(file);
  ScopedFd fd(::open((std::string(dir) + "/err").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  ASSERT_TRUE(fd.valid());
  o.err = Stdio::Fd(fd.get());
  auto r = RunSubprocess(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(ReadSmallFile(file).value_or(""), "to-file\n");
  EXPECT_EQ(ReadSmallFile(std::string(dir) + "/err").value_or(""), "to-fd\n");
  ::unlink(file.c_str());
  ::unlink((std::string(dir) + "/err").c_str());
  ::rmdir(dir);
}

TEST(SubprocessTest, KillsAChildPastItsDeadline) {
  SpawnOptions o = Sh("echo started; exec sleep 100");
  o.timeout_ms = 200;
  const int64_t t0 = MonotonicNowNs();
  auto r = RunSubprocess(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->signal, SIGKILL);
  EXPECT_EQ(r->out, "started\n");
  EXPECT_FALSE(r->Succeeded());
  EXPECT_LT(MonotonicNowNs() - t0, 50'000'000'000);
}

TEST(SubprocessTest, ADeadlineThatIsNotReachedChangesNothing) {
  SpawnOptions o = Sh("echo quick");
  o.timeout_ms = 60'000;
  auto r = RunSubprocess(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->timed_out);
  EXPECT_TRUE(r->Succeeded());
  EXPECT_EQ(r->out, "quick\n");
}

TEST(SubprocessTest, ADescendantHoldingThePipesDoesNotHoldTheResultPastTheDeadline) {
  // The shell exits at once; its background child keeps stdout open. With
  // a deadline the pipes are read for at most that long after the exit.
  SpawnOptions o = Sh("echo parent; sleep 1000 & exit 5");
  o.new_session = true;  // the stray is in the child's group: killed below
  o.timeout_ms = 300;
  auto p = Subprocess::Spawn(o);
  ASSERT_TRUE(p.ok()) << p.status();
  const pid_t group = p->pid();
  auto r = p->Wait(o.timeout_ms);
  ::kill(-group, SIGKILL);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ExitedWith(5)) << r->Describe();
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(r->out, "parent\n");
}

TEST(SubprocessTest, PollReportsRunningThenTheExit) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ScopedFd go_r(fds[0]), go_w(fds[1]);
  SpawnOptions o = Sh("read x; echo got $x");
  o.in = Stdio::Fd(go_r.get());
  auto p = Subprocess::Spawn(o);
  ASSERT_TRUE(p.ok()) << p.status();
  go_r.Reset();
  EXPECT_TRUE(p->running());
  auto first = p->Poll();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->has_value());  // blocked on its stdin
  ASSERT_EQ(::write(go_w.get(), "1\n", 2), 2);
  auto done = p->Wait();
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->out, "got 1\n");
  EXPECT_FALSE(p->running());
  EXPECT_TRUE(absl::IsFailedPrecondition(p->Poll().status()));
}

TEST(SubprocessTest, SignalAndTheDestructorEndAChild) {
  SpawnOptions o;
  o.argv = {"sleep", "100"};
  auto p = Subprocess::Spawn(o);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->Signal(SIGTERM).ok());
  auto r = p->Wait();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->signal, SIGTERM);
  EXPECT_EQ(r->Describe(), "killed by signal 15");

  pid_t pid;
  {
    auto q = Subprocess::Spawn(o);
    ASSERT_TRUE(q.ok()) << q.status();
    pid = q->pid();
  }
  // Reaped by the destructor: the pid is no child of ours any more.
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(SubprocessTest, AProgramThatCannotRunIsAnError) {
  SpawnOptions o;
  o.argv = {"dsec-no-such-program"};
  EXPECT_TRUE(absl::IsNotFound(Subprocess::Spawn(o).status()));
  o.argv = {"/nonexistent/prog"};
  EXPECT_TRUE(absl::IsNotFound(Subprocess::Spawn(o).status()));
  o.argv = {};
  EXPECT_TRUE(absl::IsInvalidArgument(Subprocess::Spawn(o).status()));
  o.argv = {"true"};
  o.in = Stdio::Capture();
  EXPECT_TRUE(absl::IsInvalidArgument(Subprocess::Spawn(o).status()));
}

TEST(SubprocessTest, ForkPathEntersAMountNamespaceAndReportsExecErrors) {
  ScopedFd ns(::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(ns.valid());
  SpawnOptions o = Sh("echo forked; exit 4");
  o.mount_ns_fd = ns.get();
  o.new_session = true;
  auto r = RunSubprocess(o);
  if (!r.ok() && absl::IsPermissionDenied(r.status())) GTEST_SKIP() << "setns needs CAP_SYS_ADMIN";
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out, "forked\n");
  EXPECT_EQ(r->exit_code, 4);
  // An exec failure in the forked child comes back as the errno.
  char dir[] = "/tmp/dsec-subprocess-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string script = std::string(dir) + "/noexec";
  ScopedFd f(::open(script.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0755));
  ASSERT_TRUE(f.valid());
  ASSERT_EQ(::write(f.get(), "\x7f" "ELF", 4), 4);  // not a runnable binary
  f.Reset();
  o.argv = {script};
  auto bad = RunSubprocess(o);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(script), absl::string_view::npos) << bad.status();
  ::unlink(script.c_str());
  ::rmdir(dir);
}

TEST(SubprocessTest, CheckedRunNamesTheProgramAndItsStderr) {
  SpawnOptions o = Sh("echo broken >&2; exit 1");
  auto r = RunSubprocessChecked(o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInternal(r.status()));
  EXPECT_EQ(r.status().message(), "/bin/sh exited 1: broken");
}

}  // namespace
}  // namespace dsec
