// SPDX-License-Identifier: Apache-2.0
// The jailed monitor (vmm/jail) as a process, on real KVM: a call off a
// thread's list stops it (a test hook injects one on each kind of thread),
// and with the filters on and its uid dropped it still boots the guest,
// serves its devices and its control socket, and cannot open root's files.
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/scoped_fd.h"
#include "base/subprocess.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_support.h"

namespace {

using dsec::testing::RunCommand;

// A uid/gid of this test's own, far above any real account.
uint32_t TestUid() { return 1'900'500'000u + static_cast<uint32_t>(::getpid() % 60000); }

// Waits until the unix socket `path` accepts a connection, for up to
// timeout_ms, or until process `pid` exits. Its creation is an event (bind
// makes the file: inotify on its directory), as is the exit (pidfd); a
// socket bound but not listening yet (ECONNREFUSED) has none, and is
// re-tried every 5 ms.
bool WaitForListeningSocket(const std::string& path, pid_t pid, int64_t timeout_ms) {
  const int64_t deadline = dsec::MonotonicNowNs() + timeout_ms * 1'000'000;
  dsec::ScopedFd watch(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  dsec::ScopedFd exited(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!watch || !exited) return false;
  const std::string dir = path.substr(0, path.rfind('/'));
  if (::inotify_add_watch(watch.get(), dir.c_str(), IN_CREATE | IN_MOVED_TO) < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  for (;;) {
    dsec::ScopedFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return true;
    const int err = errno;
    const int64_t left_ms = (deadline - dsec::MonotonicNowNs()) / 1'000'000;
    if (left_ms <= 0) return false;
    pollfd p[2] = {{watch.get(), POLLIN, 0}, {exited.get(), POLLIN, 0}};
    const int wait_ms = err == ENOENT ? static_cast<int>(left_ms) : static_cast<int>(std::min<int64_t>(left_ms, 5));
    if (::poll(p, 2, wait_ms) > 0 && (p[1].revents & POLLIN) != 0) return false;
    char buf[4096];
    while (::read(watch.get(), buf, sizeof(buf)) > 0) {
    }
  }
}

class MonitorJailTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = dsec::testing::KvmUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << why;
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (--uid)";
    mon_ = dsec::testing::MonitorBinaryPath();
  }

  std::vector<std::string> Base(const std::string& run, const std::string& timeout_ms = "20000") {
    return {mon_, "--console", "none", "--cmdline", "console=ttyS0 testguest.run=" + run,
            "--timeout-ms", timeout_ms};
  }
  std::vector<std::string> Jailed(std::vector<std::string> argv) {
    const std::string id = std::to_string(TestUid());
    for (const std::string& a : {std::string("--uid"), id, std::string("--gid"), id}) {
      argv.push_back(a);
    }
    return argv;
  }
  // Every kind of thread: a control socket and a reclaim controller too.
  std::vector<std::string> AllThreads(std::vector<std::string> argv) {
    for (const std::string& a : {std::string("--balloon"), std::string("--reclaim"),
                                 std::string("balloon"), std::string("--control"),
                                 dir_.path() + "/control.sock"}) {
      argv.push_back(a);
    }
    return argv;
  }
  nlohmann::json Stats(const std::string& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in, nullptr, false);
  }

  std::string mon_;
  dsec::testing::TempDir dir_;
};

TEST_F(MonitorJailTest, ACallOffItsListKillsTheMonitorOnEveryKindOfThread) {
  for (const char* kind : {"main", "vcpu", "event-loop", "control", "reclaim"}) {
    auto argv = AllThreads(Base("spin:1000000000000"));
    argv.push_back("--test-hook");
    argv.push_back(absl::StrCat("syscall:", kind));
    auto r = RunCommand(argv);
    // Stopped at the call, with one line naming it (getppid is 110) and the
    // thread kind, status 159 (128 + SIGSYS).
    EXPECT_EQ(r.exit_status, 159) << kind << ": signal " << r.term_signal << "\n" << r.err;
    EXPECT_NE(r.err.find(absl::StrCat("seccomp: system call 110 is not allowed on a ", kind,
                                      " thread")),
              std::string::npos)
        << kind << "\n" << r.err;
    EXPECT_EQ(r.err.find("test hook: getppid"), std::string::npos) << kind << r.err;
  }
}

TEST_F(MonitorJailTest, LogModeLetsTheSameCallsThroughOnEveryKind) {
  auto argv = AllThreads(Base("spin:1000000000000", "1500"));
  for (const char* kind : {"main", "vcpu", "event-loop", "control", "reclaim"}) {
    argv.push_back("--test-hook");
    argv.push_back(absl::StrCat("syscall:", kind));
  }
  argv.push_back("--seccomp");
  argv.push_back("log");
  auto r = RunCommand(argv);
  EXPECT_EQ(r.exit_status, 6) << r.err;  // the timeout: the guest ran
  for (const char* kind : {"main", "vcpu", "event-loop", "control", "reclaim"}) {
    EXPECT_NE(r.err.find(absl::StrCat("getppid on a ", kind, " thread returned")),
              std::string::npos)
        << kind << "\n" << r.err;
  }
}

TEST_F(MonitorJailTest, TheDroppedMonitorBootsItsGuestAndCannotOpenRootsFiles) {
  const std::string secret = dir_.path() + "/secret";
  std::ofstream(secret) << "root only\n";
  ASSERT_EQ(::chmod(secret.c_str(), 0600), 0);
  const std::string stats = dir_.path() + "/stats.json";
  auto argv = Jailed(AllThreads(Base("boot")));
  for (const std::string& a : {std::string("--stats-json"), stats, std::string("--test-hook"),
                               "open:" + secret, std::string("--test-hook"),
                               std::string("open:/proc/self/status")}) {
    argv.push_back(a);
  }
  auto r = RunCommand(argv);
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_NE(r.err.find("open " + secret + ": Permission denied"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("open /proc/self/status: opened"), std::string::npos) << r.err;
  nlohmann::json j = Stats(stats);
  ASSERT_TRUE(j.is_object()) << "no stats";
  EXPECT_EQ(j["stop_reason"], "guest-shutdown");
  EXPECT_EQ(j["jail"]["uid"], TestUid());
  EXPECT_EQ(j["jail"]["gid"], TestUid());
  EXPECT_EQ(j["jail"]["capabilities"], false);
  EXPECT_EQ(j["jail"]["seccomp"], "kill");
  EXPECT_GT(j["vmm_rss_bytes"].get<uint64_t>(), 0u);  // /proc/self still read
  // The filtered, dropped-uid main thread unmapped the binary's read-only
  // pages (madvise is on every thread's list) and the VM ran on.
  EXPECT_GT(j["image_pages_released_bytes"].get<uint64_t>(), 1u << 20);
}

TEST_F(MonitorJailTest, DevicesServeUnderTheFiltersAndTheDroppedUid) {
  const std::string disk = dir_.path() + "/disk.img";
  {
    std::ofstream out(disk, std::ios::binary);
    out.seekp((4 << 20) - 1);
    out.put('\0');
  }
  struct Case {
    std::string run;
    std::vector<std::string> flags;
    std::string workload;
  };
  const std::vector<Case> cases = {
      {"rng:65536", {"--rng"}, "rng"},
      {"blk-test:300", {"--disk", disk}, "blk"},
  };
  for (const Case& c : cases) {
    auto argv = Jailed(Base(c.run));
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    argv[2] = "stdio";  // --console: the test guest's reports on stdout
    argv.push_back("--quiet-report");
    auto r = RunCommand(argv);
    EXPECT_EQ(r.exit_status, 0) << c.run << "\n" << r.err;
    EXPECT_EQ(r.term_signal, 0) << c.run << "\n" << r.err;
  }
}

// Runs the monitor in the background, talks to its control socket with
// `dsec-vmm vm ctl`, then stops it with SIGTERM.
TEST_F(MonitorJailTest, TheControlSocketAnswersUnderTheFilters) {
  const std::string sock = dir_.path() + "/control.sock";
  dsec::SpawnOptions spawn;
  spawn.argv = Jailed(AllThreads(Base("spin:1000000000000", "60000")));
  spawn.out = dsec::Stdio::Inherit();
  spawn.err = dsec::Stdio::Inherit();
  auto monitor = dsec::Subprocess::Spawn(spawn);
  ASSERT_TRUE(monitor.ok()) << monitor.status();
  ASSERT_TRUE(WaitForListeningSocket(sock, monitor->pid(), 5000)) << "the control socket did not answer";
  const std::string vmm = dsec::testing::VmmBinaryPath();
  for (std::vector<std::string> op : {std::vector<std::string>{"stats"}, {"pause"}, {"resume"},
                                      {"balloon", "--target-mib", "8"}, {"stats"}}) {
    std::vector<std::string> call = {vmm, "vm", "ctl", "--socket", sock};
    call.insert(call.end(), op.begin(), op.end());
    auto r = RunCommand(call);
    EXPECT_EQ(r.exit_status, 0) << op[0] << ": " << r.out << r.err;
    nlohmann::json answer = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_TRUE(answer.is_object() && answer.value("ok", false)) << op[0] << ": " << r.out;
  }
  ASSERT_TRUE(monitor->Signal(SIGTERM).ok());
  auto ended = monitor->Wait();
  ASSERT_TRUE(ended.ok()) << ended.status();
  const int status = ended->wait_status;
  EXPECT_FALSE(WIFSIGNALED(status)) << "killed by signal " << WTERMSIG(status);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);  // stopped on request
}

// Snapshots through the jailed monitor: `vm ctl snapshot` writes into
// --snapshot-dir from the filtered control thread (as the dropped uid), and
// a second jailed monitor started with --restore runs the guest to its end.
TEST_F(MonitorJailTest, SnapshotAndRestoreUnderTheFilters) {
  const std::string sock = dir_.path() + "/control.sock";
  const std::string snap = dir_.path() + "/snap";
  ASSERT_EQ(::mkdir(snap.c_str(), 0700), 0);
  ASSERT_EQ(::chown(snap.c_str(), TestUid(), TestUid()), 0);
  dsec::SpawnOptions spawn;
  // 6 s of guest: long enough that the second restored monitor below is
  // still running when its diff is asked for, even on a loaded host.
  spawn.argv = Jailed(Base("snap:600", "60000"));
  for (const std::string& a : {std::string("--control"), sock, std::string("--snapshot-dir"), snap}) {
    spawn.argv.push_back(a);
  }
  spawn.err = dsec::Stdio::Inherit();
  auto monitor = dsec::Subprocess::Spawn(spawn);
  ASSERT_TRUE(monitor.ok()) << monitor.status();
  ASSERT_TRUE(WaitForListeningSocket(sock, monitor->pid(), 5000)) << "the control socket did not answer";
  const std::string vmm = dsec::testing::VmmBinaryPath();
  auto r = RunCommand({vmm, "vm", "ctl", "--socket", sock, "snapshot"});
  EXPECT_EQ(r.exit_status, 0) << r.out << r.err;
  nlohmann::json answer = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(answer.is_object() && answer.value("ok", false)) << r.out;
  EXPECT_EQ(answer.value("memory_bytes", 0ull), 128ull << 20) << r.out;
  // A second one into the same directory is refused, the first kept.
  r = RunCommand({vmm, "vm", "ctl", "--socket", sock, "snapshot"});
  EXPECT_EQ(r.exit_status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("ALREADY_EXISTS"), std::string::npos) << r.out;
  ASSERT_TRUE(monitor->Signal(SIGTERM).ok());
  auto ended = monitor->Wait();
  ASSERT_TRUE(ended.ok()) << ended.status();
  ASSERT_TRUE(WIFEXITED(ended->wait_status)) << "the monitor was killed (a call off its list?)";
  EXPECT_EQ(WEXITSTATUS(ended->wait_status), 7);

  auto argv = Jailed({mon_, "--console", "none", "--restore", snap, "--timeout-ms", "60000"});
  auto restored = RunCommand(argv);
  EXPECT_EQ(restored.exit_status, 0) << restored.out << restored.err;
  EXPECT_NE(restored.out.find("testguest: result workload=snap ticks=600"), std::string::npos)
      << restored.out << restored.err;
  EXPECT_NE(restored.out.find("mismatches=0"), std::string::npos) << restored.out;

  // A restored, jailed monitor takes a diff snapshot (it reads its own
  // /proc/self/pagemap under the filters, as the dropped uid).
  const std::string diff = dir_.path() + "/diff";
  ASSERT_EQ(::mkdir(diff.c_str(), 0700), 0);
  ASSERT_EQ(::chown(diff.c_str(), TestUid(), TestUid()), 0);
  const std::string sock2 = dir_.path() + "/control2.sock";
  spawn.argv = Jailed({mon_, "--console", "none", "--restore", snap, "--timeout-ms", "60000",
                       "--control", sock2, "--snapshot-dir", diff});
  auto again = dsec::Subprocess::Spawn(spawn);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(WaitForListeningSocket(sock2, again->pid(), 5000));
  r = RunCommand({vmm, "vm", "ctl", "--socket", sock2, "snapshot", "--diff"});
  EXPECT_EQ(r.exit_status, 0) << r.out << r.err;
  answer = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(answer.is_object() && answer.value("ok", false)) << r.out;
  EXPECT_EQ(answer.value("diff", false), true) << r.out;
  EXPECT_LT(answer.value("memory_bytes_written", ~0ull), 8ull << 20) << r.out;
  ASSERT_TRUE(again->Signal(SIGTERM).ok());
  auto ended2 = again->Wait();
  ASSERT_TRUE(ended2.ok());
  ASSERT_TRUE(WIFEXITED(ended2->wait_status)) << "the monitor was killed (a call off its list?)";
  // Lazily, under the filters (the pager thread has its own list): the
  // first restore records the pages it touched, the next prefetches them.
  const std::string touched = dir_.path() + "/touched.json";
  std::vector<nlohmann::json> lazy_stats;
  for (int round = 0; round < 2; ++round) {
    const std::string stats = dir_.path() + "/lazy-stats-" + std::to_string(round) + ".json";
    auto lazy = Jailed({mon_, "--console", "none", "--restore", snap, "--timeout-ms", "60000",
                        "--lazy", "--stats-json", stats});
    for (const std::string& a : round == 0 ? std::vector<std::string>{"--record-touched", touched}
                                           : std::vector<std::string>{"--prefetch", touched}) {
      lazy.push_back(a);
    }
    auto ran = RunCommand(lazy);
    if (round == 0 && ran.exit_status == 2 && ran.err.find("userfaultfd") != std::string::npos) {
      GTEST_SKIP() << "the lazy restores (last in this test): " << ran.err;
    }
    EXPECT_EQ(ran.exit_status, 0) << "round " << round << "\n" << ran.out << ran.err;
    EXPECT_NE(ran.out.find("testguest: result workload=snap ticks=600"), std::string::npos)
        << ran.out << ran.err;
    EXPECT_NE(ran.out.find("mismatches=0"), std::string::npos) << ran.out;
    lazy_stats.push_back(Stats(stats));
  }
  ASSERT_TRUE(lazy_stats[0].is_object() && lazy_stats[1].is_object());
  EXPECT_GT(lazy_stats[0].value("lazy_faults", 0ull), 0u) << lazy_stats[0].dump();
  EXPECT_GT(lazy_stats[1].value("lazy_prefetched_pages", 0ull), 0u) << lazy_stats[1].dump();
  EXPECT_LT(lazy_stats[1].value("lazy_faults", ~0ull), lazy_stats[0].value("lazy_faults", 0ull))
      << lazy_stats[1].dump();
  // A call off the pager's list stops the monitor, naming the pager.
  auto off_list = Jailed({mon_, "--console", "none", "--restore", snap, "--timeout-ms", "60000",
                          "--lazy", "--test-hook", "syscall:pager"});
  auto killed = RunCommand(off_list);
  EXPECT_EQ(killed.exit_status, 159) << killed.err;
  EXPECT_NE(killed.err.find("seccomp: system call 110 is not allowed on a pager thread"),
            std::string::npos)
      << killed.err;
}

TEST_F(MonitorJailTest, BadJailFlagsAreOneClearLine) {
  struct Case {
    std::vector<std::string> extra;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--uid", "1900000001"}, "--uid and --gid go together"},
      {{"--uid", "0", "--gid", "5"}, "--uid"},
      {{"--seccomp", "strict"}, "--seccomp"},
      {{"--qos", "ls", "--uid", "1900000001", "--gid", "1900000001"}, "--qos needs"},
      {{"--test-hook", "syscall:gpu"}, "syscall:gpu"},
  };
  for (const Case& c : cases) {
    auto argv = Base("boot");
    argv.insert(argv.end(), c.extra.begin(), c.extra.end());
    auto r = RunCommand(argv);
    EXPECT_EQ(r.exit_status, 2) << c.says << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
}

}  // namespace
